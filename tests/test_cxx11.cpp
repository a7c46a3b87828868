/*
 * test_cxx11: distlock.hpp compiled as C++11 (-std=c++11 -pedantic, every
 * warning an error), every member instantiated, and what needs no server
 * checked: option and name errors as std::system_error, the token refused
 * without a hold, and the saturating deadline conversion.  The calls that
 * talk to Redis are test_cxx's (C++17).
 */
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <system_error>

#include "distlock.hpp"

#define CHECK(cond)                                                          \
    do {                                                                     \
        if (!(cond)) {                                                       \
            std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__,      \
                         __LINE__, #cond);                                   \
            std::exit(1);                                                    \
        }                                                                    \
    } while (0)

/* The error number of what f throws; 0 when it throws nothing. */
template <class F>
static int thrown(F f)
{
    try {
        f();
    } catch (const std::system_error &e) {
        CHECK(e.code().category() == std::generic_category());
        return e.code().value();
    }
    return 0;
}

struct other_clock {
    typedef std::chrono::steady_clock::duration duration;
    typedef duration::rep rep;
    typedef duration::period period;
    typedef std::chrono::time_point<other_clock> time_point;
    static const bool is_steady = true;
    static time_point now()
    {
        return time_point(std::chrono::steady_clock::now().time_since_epoch());
    }
};

/* Never called: makes the compiler instantiate every template member on
 * the three kinds of clock. */
void instantiate(distlock::timed_mutex &m, distlock::shared_mutex &s);
void instantiate(distlock::timed_mutex &m, distlock::shared_mutex &s)
{
    std::chrono::milliseconds ms(1);

    m.try_lock_for(ms);
    m.try_lock_until(std::chrono::steady_clock::now() + ms);
    m.try_lock_until(std::chrono::system_clock::now() + ms);
    m.try_lock_until(other_clock::now() + ms);
    s.try_lock_for(ms);
    s.try_lock_until(std::chrono::steady_clock::now() + ms);
    s.try_lock_until(std::chrono::system_clock::now() + ms);
    s.try_lock_until(other_clock::now() + ms);
    s.try_lock_shared_for(ms);
    s.try_lock_shared_until(std::chrono::steady_clock::now() + ms);
    s.try_lock_shared_until(std::chrono::system_clock::now() + ms);
    s.try_lock_shared_until(other_clock::now() + ms);
    std::lock_guard<distlock::timed_mutex> g(m);
    std::unique_lock<distlock::shared_mutex> u(s, std::defer_lock);
    s.lock_shared();
    s.unlock_shared();
    (void)s.try_lock_shared();
}

static void test_conversion()
{
    using distlock::detail::to_timespec;
    struct timespec ts;

    ts = to_timespec(std::chrono::milliseconds(1500));
    CHECK(ts.tv_sec == 1 && ts.tv_nsec == 500000000);
    ts = to_timespec(std::chrono::nanoseconds(-1));
    CHECK(ts.tv_sec == 0 && ts.tv_nsec == 0);
    ts = to_timespec(std::chrono::hours::max());
    CHECK(ts.tv_sec == static_cast<std::time_t>(1000000000000LL));
    ts = to_timespec(std::chrono::nanoseconds::max());
    CHECK(ts.tv_sec == static_cast<std::time_t>(
              std::chrono::nanoseconds::max().count() / 1000000000));
    ts = to_timespec(std::chrono::duration<double>(2.25));
    CHECK(ts.tv_sec == 2 && ts.tv_nsec == 250000000);
}

static void construct_empty_mutex() { distlock::mutex m(""); }
static void construct_nul_mutex() { distlock::mutex m(std::string("a\0b", 3)); }

static void construct_negative_lease()
{
    distlock::shared_mutex_options o;
    o.lease = std::chrono::milliseconds(-5);
    distlock::shared_mutex s("test_cxx11:lease", o);
}

static distlock::mutex *g_m;
static distlock::shared_mutex *g_s;
static void token_of_mutex() { (void)g_m->token(); }
static void token_of_rwlock() { (void)g_s->token(); }

int main()
{
    distlock::mutex_options mo;
    mo.type = distlock::mutex_type::errorcheck;
    mo.fair = true;
    mo.lease = std::chrono::milliseconds(5000);
    distlock::timed_mutex m("test_cxx11:m", mo);
    distlock::shared_mutex s("test_cxx11:rw");

    (void)&instantiate;
    /* never a server this test did not start: a socket nobody listens on,
     * so that a call that did talk would fail with EIO, not EPERM */
    CHECK(dist_set_url("unix:///nonexistent-distlock-test-dir/redis.sock") == 0);
    test_conversion();
    CHECK(thrown(construct_empty_mutex) == EINVAL);
    CHECK(thrown(construct_nul_mutex) == EINVAL);
    CHECK(thrown(construct_negative_lease) == EINVAL);
    /* nothing held: refused before any I/O */
    g_m = &m;
    g_s = &s;
    CHECK(thrown(token_of_mutex) == EPERM);
    CHECK(thrown(token_of_rwlock) == EPERM);
    std::error_code ec;
    CHECK(!m.unlock(ec) && ec == std::errc::operation_not_permitted);
    CHECK(!s.unlock(ec) && ec == std::errc::operation_not_permitted);
    CHECK(m.native_handle() != 0 && s.native_handle() != 0);
    std::printf("ok distlock.hpp as C++%ld\n", static_cast<long>(__cplusplus));
    return 0;
}
