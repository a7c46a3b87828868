/*
 * inventory: distlock from C++, the locking of a program that moves stock
 * between two shelves (the stock itself is left out to keep it short).
 * Each shelf has a distributed mutex named after it, so any number of
 * these processes, on any hosts sharing one Redis, can run at once:
 *
 *   DISTLOCK_URL=redis://127.0.0.1:6379 inventory [moves]
 *
 * std::scoped_lock takes both shelves' locks without deadlock whatever
 * order another process asks for them in; a distlock::shared_mutex lets
 * readers of the price list share it while an update excludes them; a
 * timed_mutex gives up after a deadline on the steady clock.
 */
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <shared_mutex>
#include <system_error>

#include <distlock.hpp>

using namespace std::chrono_literals;

int main(int argc, char **argv)
{
    int moves = argc > 1 ? std::atoi(argv[1]) : 10;

    try {
        distlock::mutex north("inventory:shelf:north");
        distlock::mutex south("inventory:shelf:south");
        distlock::shared_mutex prices("inventory:prices");
        distlock::mutex_options o;
        o.lease = 10s; /* expires by itself if we die holding it */
        distlock::timed_mutex audit("inventory:audit", o);

        for (int i = 0; i < moves; i++) {
            /* odd moves go the other way round: the lock order flips too */
            if (i % 2 == 0) {
                std::scoped_lock both(north, south);
                std::printf("move %d north->south (token %llu)\n", i,
                            static_cast<unsigned long long>(north.token()));
            } else {
                std::scoped_lock both(south, north);
                std::printf("move %d south->north (token %llu)\n", i,
                            static_cast<unsigned long long>(south.token()));
            }
        }
        {
            std::shared_lock<distlock::shared_mutex> read(prices);
            std::printf("prices read under a shared lock\n");
        }
        {
            std::unique_lock<distlock::shared_mutex> write(prices);
            std::printf("prices updated, write token %llu\n",
                        static_cast<unsigned long long>(prices.token()));
        }
        std::unique_lock<distlock::timed_mutex> a(audit, 2s);
        if (!a.owns_lock()) {
            std::printf("the audit lock stayed busy for 2 s; skipped\n");
            return 0;
        }
        std::printf("audit done\n");
    } catch (const std::system_error &e) {
        /* e.code() is the errno value; what() has the library's reason */
        std::fprintf(stderr, "inventory: %s\n", e.what());
        return 1;
    }
    return 0;
}
