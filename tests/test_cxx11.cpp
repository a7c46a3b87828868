/*
 * test_cxx11: distlock.hpp compiled as C++11 (-std=c++11 -pedantic, every
 * warning an error), every member instantiated, and what needs no server
 * checked: option and name errors as std::system_error, the token refused
 * without a hold, a condition wait without the lock, a semaphore's bounds
 * (constructor and release), and the saturating deadline conversion.  The calls that
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
template <class F> static int thrown(F f)
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
        return time_point(
            std::chrono::steady_clock::now().time_since_epoch());
    }
};

static bool never()
{
    return false;
}

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

/* The same for the condition, the semaphore and the barrier. */
void instantiate_waits(distlock::condition_variable &cv,
                       std::unique_lock<distlock::mutex> &lk,
                       std::unique_lock<distlock::timed_mutex> &tlk,
                       distlock::counting_semaphore<3> &sem,
                       distlock::binary_semaphore &bin, distlock::barrier &b);
void instantiate_waits(distlock::condition_variable &cv,
                       std::unique_lock<distlock::mutex> &lk,
                       std::unique_lock<distlock::timed_mutex> &tlk,
                       distlock::counting_semaphore<3> &sem,
                       distlock::binary_semaphore &bin, distlock::barrier &b)
{
    std::chrono::milliseconds ms(1);
    bool (*pred)() = never;
    std::cv_status st;

    cv.wait(lk);
    cv.wait(tlk, pred);
    st = cv.wait_for(lk, ms);
    st = cv.wait_until(lk, std::chrono::steady_clock::now() + ms);
    st = cv.wait_until(tlk, std::chrono::system_clock::now() + ms);
    st = cv.wait_until(lk, other_clock::now() + ms);
    (void)st;
    (void)cv.wait_for(lk, ms, pred);
    (void)cv.wait_until(lk, std::chrono::steady_clock::now() + ms, pred);
    (void)cv.wait_until(lk, std::chrono::system_clock::now() + ms, pred);
    (void)cv.wait_until(lk, other_clock::now() + ms, pred);
    cv.notify_one();
    cv.notify_all();
    sem.acquire();
    sem.release();
    sem.release(2);
    (void)sem.try_acquire();
    (void)sem.try_acquire_for(ms);
    (void)sem.try_acquire_until(std::chrono::steady_clock::now() + ms);
    (void)sem.try_acquire_until(std::chrono::system_clock::now() + ms);
    (void)sem.try_acquire_until(other_clock::now() + ms);
    (void)sem.value();
    sem.set_value(1);
    bin.acquire();
    bin.release();
    (void)b.arrive_and_wait();
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
    CHECK(ts.tv_sec ==
          static_cast<std::time_t>(std::chrono::nanoseconds::max().count() /
                                   1000000000));
    ts = to_timespec(std::chrono::duration<double>(2.25));
    CHECK(ts.tv_sec == 2 && ts.tv_nsec == 250000000);
}

static void construct_empty_mutex()
{
    distlock::mutex m("");
}
static void construct_nul_mutex()
{
    distlock::mutex m(std::string("a\0b", 3));
}

static void construct_negative_lease()
{
    distlock::shared_mutex_options o;
    o.lease = std::chrono::milliseconds(-5);
    distlock::shared_mutex s("test_cxx11:lease", o);
}

static void construct_semaphore_over_max()
{
    distlock::counting_semaphore<2> s("test_cxx11:sem", 3);
}

static void construct_semaphore_negative()
{
    distlock::binary_semaphore s("test_cxx11:sem", -1);
}

static void construct_barrier_zero()
{
    distlock::barrier b("test_cxx11:b", 0);
}

static distlock::counting_semaphore<2> *g_sem;
static void release_negative()
{
    g_sem->release(-1);
}
static void release_past_max()
{
    g_sem->release(3);
}

static distlock::condition_variable *g_cv;
static distlock::mutex *g_m;
static void wait_without_lock()
{
    std::unique_lock<distlock::mutex> lk(*g_m, std::defer_lock);
    g_cv->wait(lk);
}

static void test_waits()
{
    distlock::condition_variable cv("test_cxx11:cv");
    distlock::counting_semaphore<2> sem("test_cxx11:sem", 2);

    (void)&instantiate_waits;
    static_assert(distlock::counting_semaphore<2>::max() == 2, "max()");
    static_assert(distlock::binary_semaphore::max() == 1, "max()");
    static_assert(distlock::counting_semaphore<>::max() == DIST_SEM_VALUE_MAX,
                  "max()");
    CHECK(thrown(construct_semaphore_over_max) == EINVAL);
    CHECK(thrown(construct_semaphore_negative) == EINVAL);
    CHECK(thrown(construct_barrier_zero) == EINVAL);
    g_sem = &sem;
    CHECK(thrown(release_negative) == EINVAL);
    CHECK(thrown(release_past_max) == EOVERFLOW);
    sem.release(0); /* nothing to do: no I/O, no error */
    g_cv = &cv;
    CHECK(thrown(wait_without_lock) == EPERM);
    CHECK(cv.native_handle() != 0 && sem.native_handle() != 0);
}

static distlock::shared_mutex *g_s;
static void token_of_mutex()
{
    (void)g_m->token();
}
static void token_of_rwlock()
{
    (void)g_s->token();
}

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
    CHECK(dist_set_url("unix:///nonexistent-distlock-test-dir/redis.sock") ==
          0);
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
    test_waits();
    std::printf("ok distlock.hpp as C++%ld\n",
                static_cast<long>(__cplusplus));
    return 0;
}
