/*
 * distlock.hpp: the C API of distlock.h as C++ standard-library mutex types.
 *
 *   distlock::mutex          Lockable            (std::lock_guard,
 *                                                 std::unique_lock,
 *                                                 std::scoped_lock, std::lock,
 *                                                 std::condition_variable_any)
 *   distlock::timed_mutex    TimedLockable       (try_lock_for, try_lock_until)
 *   distlock::shared_mutex   SharedTimedLockable (std::shared_lock), over
 *                                                 dist_rwlock_t
 *
 * Header only: link with -ldistlock as a C program does (pkg-config
 * distlock, or the CMake target distlock::distlock).  Needs C++11; the
 * standard lock types it is meant for are C++11 (lock_guard, unique_lock,
 * condition_variable_any), C++14 (shared_lock) and C++17 (scoped_lock).
 *
 * Errors.  A failing call throws std::system_error whose code() is the
 * errno value in std::generic_category() and whose what() carries
 * dist_last_error()'s text.  try_lock and the timed calls never throw for a
 * lock that someone else holds: they answer false.  unlock never throws
 * (the standard's Lockable requires it, and std::lock_guard calls it from a
 * destructor); unlock(std::error_code&) tells what the C call returned, and
 * a hold found lost is reported to dist_set_lost_handler's handler as well.
 *
 * Deadlines.  A std::chrono::steady_clock deadline is handed to the C API
 * as CLOCK_MONOTONIC and a system_clock one as CLOCK_REALTIME (the clock
 * variants, dist_mutex_clocklock and friends), so that a steady deadline
 * does not move when the wall clock is stepped.  A deadline on any other
 * clock is waited for on the steady clock, checked against its own clock
 * again when that wait ends, as the standard asks of try_lock_until.
 * try_lock_for waits on the steady clock.
 *
 * Copying and moving.  None of the three can be copied or moved, as
 * std::mutex: the C object belongs at one address for its life (the C API
 * makes no promise that a dist_mutex_t may be relocated), other threads may
 * be inside a call on it, and a moved-from object would be a fourth state
 * that every call had to check.  Hold one by std::unique_ptr to move it.
 *
 * The destructor calls dist_mutex_destroy (dist_rwlock_destroy); destroying
 * one that a thread of this process holds is an error, as for std::mutex
 * (the C call refuses with EBUSY and what it allocated stays).
 */
#ifndef DISTLOCK_HPP
#define DISTLOCK_HPP

#include <chrono>
#include <cstdint>
#include <time.h>
#include <string>
#include <system_error>
#include <type_traits>

#include "distlock.h"

namespace distlock {

/* The type of a mutex (dist_mutexattr_settype). */
enum class mutex_type {
    recursive = DIST_MUTEX_RECURSIVE,    /* default: n locks need n unlocks */
    errorcheck = DIST_MUTEX_ERRORCHECK   /* a relock by the owner is an error
                                          * (lock throws EDEADLK; try_lock
                                          * answers false) */
};

/* How a mutex is made; the defaults are dist_mutexattr_init's. */
struct mutex_options {
    mutex_type type = mutex_type::recursive;
    /* 0: the watchdog lease, renewed while held; otherwise the hold ends
     * this long after each lock unless unlocked first */
    std::chrono::milliseconds lease{0};
    /* strict FIFO across processes (dist_mutexattr_setfair) */
    bool fair = false;
};

/* Whom a waiting writer keeps out (dist_rwlockattr_setkind). */
enum class rwlock_kind {
    prefer_reader = DIST_RWLOCK_PREFER_READER,   /* default */
    prefer_writer = DIST_RWLOCK_PREFER_WRITER
};

/* How a shared_mutex is made; the defaults are dist_rwlockattr_init's. */
struct shared_mutex_options {
    std::chrono::milliseconds lease{0};          /* as mutex_options::lease */
    rwlock_kind kind = rwlock_kind::prefer_reader;
};

namespace detail {

/* The exception for a C result rc (not 0): the errno value, and the
 * library's reason when it has one. */
inline std::system_error error(int rc, const char *call)
{
    const char *why = dist_last_error();
    std::string what(call);

    if (why && *why) {
        what += ": ";
        what += why;
    }
    return std::system_error(rc, std::generic_category(), what);
}

inline void check(int rc, const char *call)
{
    if (rc != 0)
        throw error(rc, call);
}

/* A name for the C API, which takes NUL-terminated names: one with a NUL
 * inside would silently be another, shorter name. */
inline const char *c_name(const std::string &name)
{
    if (name.find('\0') != std::string::npos)
        throw std::system_error(EINVAL, std::generic_category(),
                                "distlock: a lock name cannot contain a NUL byte");
    return name.c_str();
}

inline unsigned long lease_ms(std::chrono::milliseconds lease)
{
    if (lease.count() < 0)
        throw std::system_error(EINVAL, std::generic_category(),
                                "distlock: a negative lease");
    return static_cast<unsigned long>(lease.count());
}

/* A point d after a clock's epoch as a timespec, saturating: a deadline
 * before the epoch is the epoch (long past), one beyond about 30000 years
 * (std::chrono::...::max() and its kin) is that far, so that no
 * conversion overflows. */
template <class Rep, class Period>
inline struct timespec to_timespec(std::chrono::duration<Rep, Period> d)
{
    typedef std::chrono::duration<long double> fsec;
    const long double far = 1e12L;   /* seconds */
    struct timespec ts;
    long double s = std::chrono::duration_cast<fsec>(d).count();

    if (!(s > 0)) {
        ts.tv_sec = 0;
        ts.tv_nsec = 0;
    } else if (s >= far) {
        ts.tv_sec = static_cast<std::time_t>(far);
        ts.tv_nsec = 0;
    } else {
        std::chrono::nanoseconds ns =
            std::chrono::duration_cast<std::chrono::nanoseconds>(d);
        ts.tv_sec = static_cast<std::time_t>(ns.count() / 1000000000);
        ts.tv_nsec = static_cast<long>(ns.count() % 1000000000);
    }
    return ts;
}

/* The steady clock's now plus rel, as a CLOCK_MONOTONIC timespec (both
 * count from boot on Linux, in libstdc++ and libc++ alike). */
template <class Rep, class Period>
inline struct timespec steady_after(std::chrono::duration<Rep, Period> rel)
{
    typedef std::chrono::duration<long double> fsec;
    std::chrono::steady_clock::duration now =
        std::chrono::steady_clock::now().time_since_epoch();
    long double r = std::chrono::duration_cast<fsec>(rel).count();

    if (!(r > 0))
        return to_timespec(now);
    return to_timespec(std::chrono::duration_cast<fsec>(now) + fsec(r));
}

/* Waits until tp with lock(clockid, abstime), a clock variant of the C
 * API: 0, ETIMEDOUT or another error number.  Three cases by clock. */
template <class Clock, class Duration, class Fn>
inline int wait_until(const std::chrono::time_point<Clock, Duration> &tp,
                      Fn lock)
{
    if (std::is_same<Clock, std::chrono::steady_clock>::value) {
        struct timespec ts = to_timespec(tp.time_since_epoch());
        return lock(CLOCK_MONOTONIC, &ts);
    }
    if (std::is_same<Clock, std::chrono::system_clock>::value) {
        struct timespec ts = to_timespec(tp.time_since_epoch());
        return lock(CLOCK_REALTIME, &ts);
    }
    /* any other clock: what is left of it, on the steady clock, until that
     * clock itself says the deadline has come (the C call still takes a
     * free lock when the time is up) */
    for (;;) {
        typename Clock::time_point now = Clock::now();
        struct timespec ts = steady_after(tp - now);
        int rc = lock(CLOCK_MONOTONIC, &ts);

        if (rc != ETIMEDOUT || !(Clock::now() < tp))
            return rc;
    }
}

/* The answer of a try or timed call: true (taken), false (held by another
 * owner, or the time was up), or an exception. */
inline bool taken(int rc, int no, const char *call)
{
    if (rc == 0)
        return true;
    if (rc == no)
        return false;
    throw error(rc, call);
}

} /* namespace detail */

/* ------------------------------------------------------------------------ */

/* A distributed mutex named name (any bytes but NUL, 1..DIST_NAME_MAX):
 * every process that makes one with that name shares it.  Recursive by
 * default, as the C API. */
class mutex {
public:
    typedef dist_mutex_t *native_handle_type;

    /* No network I/O (the C API connects at first use).  Throws EINVAL for
     * a bad name or option, ENOMEM. */
    explicit mutex(const std::string &name,
                   const mutex_options &opts = mutex_options())
    {
        dist_mutexattr_t a;

        detail::check(dist_mutexattr_init(&a), "dist_mutexattr_init");
        detail::check(dist_mutexattr_settype(&a, static_cast<int>(opts.type)),
                      "dist_mutexattr_settype");
        detail::check(dist_mutexattr_setlease(&a, detail::lease_ms(opts.lease)),
                      "dist_mutexattr_setlease");
        detail::check(dist_mutexattr_setfair(&a, opts.fair ? 1 : 0),
                      "dist_mutexattr_setfair");
        detail::check(dist_mutex_init(&m_, detail::c_name(name), &a),
                      "dist_mutex_init");
        dist_mutexattr_destroy(&a);
    }

    ~mutex() { dist_mutex_destroy(&m_); }

    mutex(const mutex &) = delete;
    mutex &operator=(const mutex &) = delete;

    /* Blocks until taken.  Throws: EDEADLK (error-checking relock), EIO,
     * DIST_ENOREPLICA, ... */
    void lock() { detail::check(dist_mutex_lock(&m_), "dist_mutex_lock"); }

    /* Never waits: false when another owner holds it (or, error-checking,
     * the caller does).  Throws only for a failure (EIO, ...). */
    bool try_lock()
    {
        return detail::taken(dist_mutex_trylock(&m_), EBUSY,
                             "dist_mutex_trylock");
    }

    /* Never throws; see unlock(std::error_code &). */
    void unlock() noexcept { dist_mutex_unlock(&m_); }

    /* Gives back one hold; false with ec set when the C call failed (EPERM:
     * not held by this thread, or the hold was lost). */
    bool unlock(std::error_code &ec) noexcept
    {
        int rc = dist_mutex_unlock(&m_);

        ec.assign(rc, std::generic_category());
        return rc == 0;
    }

    /* The fencing token of the caller's hold (dist_mutex_token).  Throws
     * EPERM when the calling thread does not hold it. */
    std::uint64_t token()
    {
        std::uint64_t t = 0;

        detail::check(dist_mutex_token(&m_, &t), "dist_mutex_token");
        return t;
    }

    native_handle_type native_handle() noexcept { return &m_; }

protected:
    dist_mutex_t m_;
};

/* A mutex with deadlines. */
class timed_mutex : public mutex {
public:
    explicit timed_mutex(const std::string &name,
                         const mutex_options &opts = mutex_options())
        : mutex(name, opts) {}

    /* Waits at most rel (on the steady clock): false when the time is up
     * first.  A free lock is taken even when rel is zero or negative. */
    template <class Rep, class Period>
    bool try_lock_for(const std::chrono::duration<Rep, Period> &rel)
    {
        struct timespec ts = detail::steady_after(rel);

        return detail::taken(dist_mutex_clocklock(&m_, CLOCK_MONOTONIC, &ts),
                             ETIMEDOUT, "dist_mutex_clocklock");
    }

    /* Waits until tp on its clock (see "Deadlines" above). */
    template <class Clock, class Duration>
    bool try_lock_until(const std::chrono::time_point<Clock, Duration> &tp)
    {
        dist_mutex_t *m = &m_;
        int rc = detail::wait_until(tp,
            [m](clockid_t c, const struct timespec *ts) {
                return dist_mutex_clocklock(m, c, ts);
            });

        return detail::taken(rc, ETIMEDOUT, "dist_mutex_clocklock");
    }
};

/* ------------------------------------------------------------------------ */

/* A distributed read-write lock (dist_rwlock_t): lock/unlock for the write
 * side, lock_shared/unlock_shared for the read side.  Both sides are
 * reentrant per thread, the writer may take read holds too, and there is
 * no upgrade: lock by a thread holding read locks only throws EDEADLK
 * (try_lock answers false).  The C API has one unlock, which gives back a
 * write hold before a read hold: unlock and unlock_shared are the same
 * call, which is what std::unique_lock and std::shared_lock need as long
 * as a thread gives back its holds in the reverse order of taking them. */
class shared_mutex {
public:
    typedef dist_rwlock_t *native_handle_type;

    /* No network I/O.  Throws EINVAL for a bad name or option, ENOMEM.
     * Not the same lock as a distlock::mutex of the same name. */
    explicit shared_mutex(const std::string &name,
                          const shared_mutex_options &opts =
                              shared_mutex_options())
    {
        dist_rwlockattr_t a;

        detail::check(dist_rwlockattr_init(&a), "dist_rwlockattr_init");
        detail::check(dist_rwlockattr_setlease(&a, detail::lease_ms(opts.lease)),
                      "dist_rwlockattr_setlease");
        detail::check(dist_rwlockattr_setkind(&a, static_cast<int>(opts.kind)),
                      "dist_rwlockattr_setkind");
        detail::check(dist_rwlock_init(&l_, detail::c_name(name), &a),
                      "dist_rwlock_init");
        dist_rwlockattr_destroy(&a);
    }

    ~shared_mutex() { dist_rwlock_destroy(&l_); }

    shared_mutex(const shared_mutex &) = delete;
    shared_mutex &operator=(const shared_mutex &) = delete;

    /* ---- exclusive (write) side ---- */

    void lock() { detail::check(dist_rwlock_wrlock(&l_), "dist_rwlock_wrlock"); }

    bool try_lock()
    {
        return detail::taken(dist_rwlock_trywrlock(&l_), EBUSY,
                             "dist_rwlock_trywrlock");
    }

    template <class Rep, class Period>
    bool try_lock_for(const std::chrono::duration<Rep, Period> &rel)
    {
        struct timespec ts = detail::steady_after(rel);

        return detail::taken(dist_rwlock_clockwrlock(&l_, CLOCK_MONOTONIC, &ts),
                             ETIMEDOUT, "dist_rwlock_clockwrlock");
    }

    template <class Clock, class Duration>
    bool try_lock_until(const std::chrono::time_point<Clock, Duration> &tp)
    {
        dist_rwlock_t *l = &l_;
        int rc = detail::wait_until(tp,
            [l](clockid_t c, const struct timespec *ts) {
                return dist_rwlock_clockwrlock(l, c, ts);
            });

        return detail::taken(rc, ETIMEDOUT, "dist_rwlock_clockwrlock");
    }

    void unlock() noexcept { dist_rwlock_unlock(&l_); }

    bool unlock(std::error_code &ec) noexcept
    {
        int rc = dist_rwlock_unlock(&l_);

        ec.assign(rc, std::generic_category());
        return rc == 0;
    }

    /* ---- shared (read) side ---- */

    void lock_shared()
    {
        detail::check(dist_rwlock_rdlock(&l_), "dist_rwlock_rdlock");
    }

    bool try_lock_shared()
    {
        return detail::taken(dist_rwlock_tryrdlock(&l_), EBUSY,
                             "dist_rwlock_tryrdlock");
    }

    template <class Rep, class Period>
    bool try_lock_shared_for(const std::chrono::duration<Rep, Period> &rel)
    {
        struct timespec ts = detail::steady_after(rel);

        return detail::taken(dist_rwlock_clockrdlock(&l_, CLOCK_MONOTONIC, &ts),
                             ETIMEDOUT, "dist_rwlock_clockrdlock");
    }

    template <class Clock, class Duration>
    bool try_lock_shared_until(
        const std::chrono::time_point<Clock, Duration> &tp)
    {
        dist_rwlock_t *l = &l_;
        int rc = detail::wait_until(tp,
            [l](clockid_t c, const struct timespec *ts) {
                return dist_rwlock_clockrdlock(l, c, ts);
            });

        return detail::taken(rc, ETIMEDOUT, "dist_rwlock_clockrdlock");
    }

    void unlock_shared() noexcept { dist_rwlock_unlock(&l_); }

    /* The fencing token of the caller's write hold (dist_rwlock_token).
     * Throws EPERM when the calling thread does not hold the write lock. */
    std::uint64_t token()
    {
        std::uint64_t t = 0;

        detail::check(dist_rwlock_token(&l_, &t), "dist_rwlock_token");
        return t;
    }

    native_handle_type native_handle() noexcept { return &l_; }

private:
    dist_rwlock_t l_;
};

} /* namespace distlock */

#endif /* DISTLOCK_HPP */
