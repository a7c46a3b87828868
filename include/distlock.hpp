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
 *   distlock::condition_variable  std::condition_variable's interface with
 *                                 std::unique_lock<distlock::mutex>, over
 *                                 dist_cond_t: a notify in one process
 *                                 wakes a waiter in another
 *   distlock::counting_semaphore<N>  std::counting_semaphore's interface,
 *                                 over dist_sem_t (binary_semaphore too)
 *   distlock::barrier        arrive_and_wait as std::barrier's, over
 *                            dist_barrier_t
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
 * Copying and moving.  None of these can be copied or moved, as
 * std::mutex: the C object belongs at one address for its life (the C API
 * makes no promise that a dist_mutex_t may be relocated), other threads may
 * be inside a call on it, and a moved-from object would be one more state
 * that every call had to check.  Hold one by std::unique_ptr to move it.
 *
 * The destructor calls dist_mutex_destroy (dist_rwlock_destroy, ...);
 * destroying one that a thread of this process holds or waits on is an
 * error, as for std::mutex (the C call refuses with EBUSY and what it
 * allocated stays).
 *
 * Where the standard's types say noexcept and the distributed ones can
 * fail (notify_one when Redis cannot be reached, try_acquire), these
 * throw std::system_error instead; everything else keeps the standard's
 * meaning.
 */
#ifndef DISTLOCK_HPP
#define DISTLOCK_HPP

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <time.h>
#include <string>
#include <system_error>
#include <type_traits>

#include "distlock.h"

namespace distlock
{

/* The type of a mutex (dist_mutexattr_settype). */
enum class mutex_type {
    recursive = DIST_MUTEX_RECURSIVE,  /* default: n locks need n unlocks */
    errorcheck = DIST_MUTEX_ERRORCHECK /* a relock by the owner is an error
                                          * (lock throws EDEADLK; try_lock
                                          * answers false) */
};

/* How a mutex is made; the defaults are dist_mutexattr_init's. */
struct mutex_options {
    mutex_type type = mutex_type::recursive;
    /* 0: the watchdog lease, renewed while held; otherwise the hold ends
     * this long after each lock unless unlocked first */
    std::chrono::milliseconds lease{ 0 };
    /* strict FIFO across processes (dist_mutexattr_setfair) */
    bool fair = false;
    /* robust (dist_mutexattr_setrobust): a lock after a holder that did not
     * release it cleanly throws distlock::owner_dead with the lock held */
    bool robust = false;
};

/* Thrown by lock, try_lock and the timed locks of a robust mutex whose
 * last holder did not release it cleanly (it died, its lease ran out, its
 * hold was forced): EOWNERDEAD.  The calling thread HOLDS the lock then,
 * though the lock_guard or unique_lock whose constructor threw does not
 * own it: the handler repairs what the lock guards and calls consistent()
 * and unlock() (the next holder gets the lock as usual), or unlock() alone
 * (the lock becomes not recoverable: every later lock in every process
 * throws ENOTRECOVERABLE until `distlock unlock --reset`).  An exception,
 * not a result, because the state is broken and code that does not know
 * must not go on as if it were not: left uncaught, the process ends with
 * the lock held, and the next holder is told the same. */
class owner_dead : public std::system_error
{
  public:
    explicit owner_dead(const std::string &what)
        : std::system_error(EOWNERDEAD, std::generic_category(), what)
    {
    }
};

/* Whom a waiting writer keeps out (dist_rwlockattr_setkind). */
enum class rwlock_kind {
    prefer_reader = DIST_RWLOCK_PREFER_READER, /* default */
    prefer_writer = DIST_RWLOCK_PREFER_WRITER
};

/* How a shared_mutex is made; the defaults are dist_rwlockattr_init's. */
struct shared_mutex_options {
    std::chrono::milliseconds lease{ 0 }; /* as mutex_options::lease */
    rwlock_kind kind = rwlock_kind::prefer_reader;
};

namespace detail
{

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
    if (rc == EOWNERDEAD)
        throw owner_dead(error(rc, call).what());
    if (rc != 0)
        throw error(rc, call);
}

/* A name for the C API, which takes NUL-terminated names: one with a NUL
 * inside would silently be another, shorter name. */
inline const char *c_name(const std::string &name)
{
    if (name.find('\0') != std::string::npos)
        throw std::system_error(
            EINVAL, std::generic_category(),
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
    const long double far = 1e12L; /* seconds */
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
    check(rc, call);
    return false;
}

/* std::counting_semaphore's waits are not interrupted by a signal: an
 * EINTR of the C call (a handler without SA_RESTART, or any handler
 * during a timed wait) is a wait that goes on. */
inline int sem_wait_on(dist_sem_t *s)
{
    int rc;

    while ((rc = dist_sem_wait(s)) == EINTR)
        continue;
    return rc;
}

inline int sem_clockwait_on(dist_sem_t *s, clockid_t c,
                            const struct timespec *ts)
{
    int rc;

    while ((rc = dist_sem_clockwait(s, c, ts)) == EINTR)
        continue;
    return rc;
}

/* What dist_mutex_lease_left and its twin said: the time left, zero for
 * EPERM (not held, or no longer surely), or an exception. */
inline std::chrono::nanoseconds left_of(int rc, const struct timespec &ts,
                                        const char *call)
{
    if (rc == EPERM)
        return std::chrono::nanoseconds::zero();
    check(rc, call);
    return std::chrono::seconds(ts.tv_sec) +
           std::chrono::nanoseconds(ts.tv_nsec);
}

/* unlock(std::error_code &)'s answer to the C call's rc: true, or false
 * with ec set. */
inline bool unlocked(int rc, std::error_code &ec) noexcept
{
    ec.assign(rc, std::generic_category());
    return rc == 0;
}

/* The fencing token a token call (dist_mutex_token and its twin) gives
 * for o, or an exception. */
template <class T>
std::uint64_t token_of(int (*fn)(T *, std::uint64_t *), T *o,
                       const char *call)
{
    std::uint64_t t = 0;

    check(fn(o, &t), call);
    return t;
}

/* What a lease_left call (dist_mutex_lease_left and its twin) says for o,
 * as left_of. */
template <class T>
std::chrono::nanoseconds lease_left_of(int (*fn)(T *, struct timespec *),
                                       T *o, const char *call)
{
    struct timespec ts;
    int rc = fn(o, &ts);

    return left_of(rc, ts, call);
}

/* The answer of a try call that may wait at most rel (steady clock):
 * clocklock(o, CLOCK_MONOTONIC, deadline) as taken says it. */
template <class T, class Rep, class Period>
bool taken_for(int (*clocklock)(T *, clockid_t, const struct timespec *),
               T *o, const std::chrono::duration<Rep, Period> &rel,
               const char *call)
{
    struct timespec ts = steady_after(rel);

    return taken(clocklock(o, CLOCK_MONOTONIC, &ts), ETIMEDOUT, call);
}

/* The same until tp on its clock (wait_until). */
template <class T, class Clock, class Duration>
bool taken_until(int (*clocklock)(T *, clockid_t, const struct timespec *),
                 T *o, const std::chrono::time_point<Clock, Duration> &tp,
                 const char *call)
{
    int rc = wait_until(
        tp, [clocklock, o](clockid_t c, const struct timespec *ts) {
            return clocklock(o, c, ts);
        });

    return taken(rc, ETIMEDOUT, call);
}

/* What every class below holds: its C object, at one address for its life
 * (no copy or move: see "Copying and moving" above), destroyed with it.
 * The derived class's constructor hands init, which sets the object up or
 * throws; a throw leaves nothing to destroy. */
template <class T, int (*Destroy)(T *)> class c_object
{
  public:
    typedef T *native_handle_type;

    c_object(const c_object &) = delete;
    c_object &operator=(const c_object &) = delete;

    native_handle_type native_handle() noexcept
    {
        return &c_;
    }

  protected:
    template <class Init> explicit c_object(Init init)
    {
        init(&c_);
    }

    ~c_object()
    {
        Destroy(&c_);
    }

    T c_;
};

} /* namespace detail */

/* ------------------------------------------------------------------------ */

/* A distributed mutex named name (any bytes but NUL, 1..DIST_NAME_MAX):
 * every process that makes one with that name shares it.  Recursive by
 * default, as the C API. */
class mutex : public detail::c_object<dist_mutex_t, dist_mutex_destroy>
{
  public:
    /* No network I/O (the C API connects at first use).  Throws EINVAL for
     * a bad name or option, ENOMEM. */
    explicit mutex(const std::string &name,
                   const mutex_options &opts = mutex_options())
        : c_object([&](dist_mutex_t *m) { make(m, name, opts); })
    {
    }

    /* Blocks until taken.  Throws: EDEADLK (error-checking relock), EIO,
     * DIST_ENOREPLICA, ... */
    void lock()
    {
        detail::check(dist_mutex_lock(&c_), "dist_mutex_lock");
    }

    /* Never waits: false when another owner holds it (or, error-checking,
     * the caller does).  Throws only for a failure (EIO, ...). */
    bool try_lock()
    {
        return detail::taken(dist_mutex_trylock(&c_), EBUSY,
                             "dist_mutex_trylock");
    }

    /* Never throws; see unlock(std::error_code &). */
    void unlock() noexcept
    {
        dist_mutex_unlock(&c_);
    }

    /* Gives back one hold; false with ec set when the C call failed (EPERM:
     * not held by this thread, or the hold was lost). */
    bool unlock(std::error_code &ec) noexcept
    {
        return detail::unlocked(dist_mutex_unlock(&c_), ec);
    }

    /* A robust mutex whose lock threw owner_dead: the state it guards was
     * repaired, and the next unlock is clean (dist_mutex_consistent).
     * Throws EINVAL (not robust, or not owner-dead), EPERM (not held). */
    void consistent()
    {
        detail::check(dist_mutex_consistent(&c_), "dist_mutex_consistent");
    }

    /* The fencing token of the caller's hold (dist_mutex_token).  Throws
     * EPERM when the calling thread does not hold it. */
    std::uint64_t token()
    {
        return detail::token_of(dist_mutex_token, &c_, "dist_mutex_token");
    }

    /* How long the caller's hold is surely still its own
     * (dist_mutex_lease_left): check it before a write elsewhere that
     * only the holder may make.  Zero when the calling thread does not
     * hold it, or no longer surely (the C call's EPERM: a value, so that
     * "less left than the write takes" covers it); throws for any other
     * failure. */
    std::chrono::nanoseconds lease_left()
    {
        return detail::lease_left_of(dist_mutex_lease_left, &c_,
                                     "dist_mutex_lease_left");
    }

  private:
    /* m set up as opts say. */
    static void make(dist_mutex_t *m, const std::string &name,
                     const mutex_options &opts)
    {
        dist_mutexattr_t a;

        detail::check(dist_mutexattr_init(&a), "dist_mutexattr_init");
        detail::check(dist_mutexattr_settype(&a, static_cast<int>(opts.type)),
                      "dist_mutexattr_settype");
        detail::check(
            dist_mutexattr_setlease(&a, detail::lease_ms(opts.lease)),
            "dist_mutexattr_setlease");
        detail::check(dist_mutexattr_setfair(&a, opts.fair ? 1 : 0),
                      "dist_mutexattr_setfair");
        detail::check(dist_mutexattr_setrobust(&a, opts.robust
                                                       ? DIST_MUTEX_ROBUST
                                                       : DIST_MUTEX_STALLED),
                      "dist_mutexattr_setrobust");
        detail::check(dist_mutex_init(m, detail::c_name(name), &a),
                      "dist_mutex_init");
        dist_mutexattr_destroy(&a);
    }
};

/* A mutex with deadlines. */
class timed_mutex : public mutex
{
  public:
    explicit timed_mutex(const std::string &name,
                         const mutex_options &opts = mutex_options())
        : mutex(name, opts)
    {
    }

    /* Waits at most rel (on the steady clock): false when the time is up
     * first.  A free lock is taken even when rel is zero or negative. */
    template <class Rep, class Period>
    bool try_lock_for(const std::chrono::duration<Rep, Period> &rel)
    {
        return detail::taken_for(dist_mutex_clocklock, &c_, rel,
                                 "dist_mutex_clocklock");
    }

    /* Waits until tp on its clock (see "Deadlines" above). */
    template <class Clock, class Duration>
    bool try_lock_until(const std::chrono::time_point<Clock, Duration> &tp)
    {
        return detail::taken_until(dist_mutex_clocklock, &c_, tp,
                                   "dist_mutex_clocklock");
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
class shared_mutex
    : public detail::c_object<dist_rwlock_t, dist_rwlock_destroy>
{
  public:
    /* No network I/O.  Throws EINVAL for a bad name or option, ENOMEM.
     * Not the same lock as a distlock::mutex of the same name. */
    explicit shared_mutex(
        const std::string &name,
        const shared_mutex_options &opts = shared_mutex_options())
        : c_object([&](dist_rwlock_t *l) { make(l, name, opts); })
    {
    }

    /* ---- exclusive (write) side ---- */

    void lock()
    {
        detail::check(dist_rwlock_wrlock(&c_), "dist_rwlock_wrlock");
    }

    bool try_lock()
    {
        return detail::taken(dist_rwlock_trywrlock(&c_), EBUSY,
                             "dist_rwlock_trywrlock");
    }

    template <class Rep, class Period>
    bool try_lock_for(const std::chrono::duration<Rep, Period> &rel)
    {
        return detail::taken_for(dist_rwlock_clockwrlock, &c_, rel,
                                 "dist_rwlock_clockwrlock");
    }

    template <class Clock, class Duration>
    bool try_lock_until(const std::chrono::time_point<Clock, Duration> &tp)
    {
        return detail::taken_until(dist_rwlock_clockwrlock, &c_, tp,
                                   "dist_rwlock_clockwrlock");
    }

    void unlock() noexcept
    {
        dist_rwlock_unlock(&c_);
    }

    bool unlock(std::error_code &ec) noexcept
    {
        return detail::unlocked(dist_rwlock_unlock(&c_), ec);
    }

    /* ---- shared (read) side ---- */

    void lock_shared()
    {
        detail::check(dist_rwlock_rdlock(&c_), "dist_rwlock_rdlock");
    }

    bool try_lock_shared()
    {
        return detail::taken(dist_rwlock_tryrdlock(&c_), EBUSY,
                             "dist_rwlock_tryrdlock");
    }

    template <class Rep, class Period>
    bool try_lock_shared_for(const std::chrono::duration<Rep, Period> &rel)
    {
        return detail::taken_for(dist_rwlock_clockrdlock, &c_, rel,
                                 "dist_rwlock_clockrdlock");
    }

    template <class Clock, class Duration>
    bool
    try_lock_shared_until(const std::chrono::time_point<Clock, Duration> &tp)
    {
        return detail::taken_until(dist_rwlock_clockrdlock, &c_, tp,
                                   "dist_rwlock_clockrdlock");
    }

    void unlock_shared() noexcept
    {
        dist_rwlock_unlock(&c_);
    }

    /* The fencing token of the caller's write hold (dist_rwlock_token).
     * Throws EPERM when the calling thread does not hold the write lock. */
    std::uint64_t token()
    {
        return detail::token_of(dist_rwlock_token, &c_, "dist_rwlock_token");
    }

    /* How long the caller's holds, exclusive or shared, are surely still
     * its own (dist_rwlock_lease_left); zero as for mutex::lease_left. */
    std::chrono::nanoseconds lease_left()
    {
        return detail::lease_left_of(dist_rwlock_lease_left, &c_,
                                     "dist_rwlock_lease_left");
    }

  private:
    /* l set up as opts say. */
    static void make(dist_rwlock_t *l, const std::string &name,
                     const shared_mutex_options &opts)
    {
        dist_rwlockattr_t a;

        detail::check(dist_rwlockattr_init(&a), "dist_rwlockattr_init");
        detail::check(
            dist_rwlockattr_setlease(&a, detail::lease_ms(opts.lease)),
            "dist_rwlockattr_setlease");
        detail::check(
            dist_rwlockattr_setkind(&a, static_cast<int>(opts.kind)),
            "dist_rwlockattr_setkind");
        detail::check(dist_rwlock_init(l, detail::c_name(name), &a),
                      "dist_rwlock_init");
        dist_rwlockattr_destroy(&a);
    }
};

/* ------------------------------------------------------------------------ */

/* A distributed condition variable named name (dist_cond_t), used with a
 * distlock::mutex (or timed_mutex) through std::unique_lock as
 * std::condition_variable is with std::mutex: a notify_one in any process
 * that names the condition wakes a waiter in any other.  The mutex must be
 * held exactly once by the waiting thread (a recursive mutex taken twice
 * throws EINVAL), and a wait returns holding it again, taken back through
 * the mutex's normal path.  Wake-ups may be spurious: wait on a predicate.
 * A notify by a thread that took the mutex after the waiter began to wait
 * always reaches it (the waiter is registered before the mutex is given
 * up); a waiter whose process died is skipped.  On a cluster the
 * condition's name must hash to the mutex's slot ("{jobs}:ready" with the
 * mutex "jobs"; see distlock.h).
 *
 * Should taking the mutex back fail (EIO when Redis cannot be reached),
 * the wait throws with the unique_lock released (owns_lock() false, no
 * mutex), since the thread no longer holds it; std::condition_variable
 * would call std::terminate. */
class condition_variable
    : public detail::c_object<dist_cond_t, dist_cond_destroy>
{
  public:
    /* No network I/O.  Throws EINVAL for a bad name, ENOMEM. */
    explicit condition_variable(const std::string &name)
        : c_object([&](dist_cond_t *c) {
              detail::check(dist_cond_init(c, detail::c_name(name), nullptr),
                            "dist_cond_init");
          })
    {
    }

    /* Wakes the oldest live waiter of any process, if there is one.
     * Throws EIO (not noexcept, unlike the standard's). */
    void notify_one()
    {
        detail::check(dist_cond_signal(&c_), "dist_cond_signal");
    }

    /* Wakes every live waiter of every process.  Throws EIO. */
    void notify_all()
    {
        detail::check(dist_cond_broadcast(&c_), "dist_cond_broadcast");
    }

    template <class M> void wait(std::unique_lock<M> &lk)
    {
        dist_mutex_t *m = handle(lk);

        done(lk, dist_cond_wait(&c_, m), "dist_cond_wait");
    }

    template <class M, class Predicate>
    void wait(std::unique_lock<M> &lk, Predicate pred)
    {
        while (!pred())
            wait(lk);
    }

    /* Waits until tp on its clock (steady_clock: CLOCK_MONOTONIC,
     * system_clock: CLOCK_REALTIME, any other: see "Deadlines" above). */
    template <class M, class Clock, class Duration>
    std::cv_status
    wait_until(std::unique_lock<M> &lk,
               const std::chrono::time_point<Clock, Duration> &tp)
    {
        dist_cond_t *c = &c_;
        dist_mutex_t *m = handle(lk);
        int rc = detail::wait_until(
            tp, [c, m](clockid_t clk, const struct timespec *ts) {
                return dist_cond_clockwait(c, m, clk, ts);
            });

        return done(lk, rc, "dist_cond_clockwait");
    }

    template <class M, class Clock, class Duration, class Predicate>
    bool wait_until(std::unique_lock<M> &lk,
                    const std::chrono::time_point<Clock, Duration> &tp,
                    Predicate pred)
    {
        while (!pred())
            if (wait_until(lk, tp) == std::cv_status::timeout)
                return pred();
        return true;
    }

    /* Waits at most rel, on the steady clock. */
    template <class M, class Rep, class Period>
    std::cv_status wait_for(std::unique_lock<M> &lk,
                            const std::chrono::duration<Rep, Period> &rel)
    {
        struct timespec ts = detail::steady_after(rel);

        return done(
            lk, dist_cond_clockwait(&c_, handle(lk), CLOCK_MONOTONIC, &ts),
            "dist_cond_clockwait");
    }

    /* Until pred() is true (true) or rel has passed on the steady clock
     * (pred() then). */
    template <class M, class Rep, class Period, class Predicate>
    bool wait_for(std::unique_lock<M> &lk,
                  const std::chrono::duration<Rep, Period> &rel,
                  Predicate pred)
    {
        struct timespec ts = detail::steady_after(rel);

        while (!pred())
            if (done(lk,
                     dist_cond_clockwait(&c_, handle(lk), CLOCK_MONOTONIC,
                                         &ts),
                     "dist_cond_clockwait") == std::cv_status::timeout)
                return pred();
        return true;
    }

  private:
    /* The C mutex of lk, which must own it (EPERM otherwise, before any
     * waiting: the standard leaves that case undefined). */
    template <class M> static dist_mutex_t *handle(std::unique_lock<M> &lk)
    {
        static_assert(std::is_base_of<mutex, M>::value,
                      "distlock::condition_variable waits with a "
                      "std::unique_lock over distlock::mutex or "
                      "distlock::timed_mutex");
        if (!lk.owns_lock())
            throw std::system_error(EPERM, std::generic_category(),
                                    "distlock: condition wait with a "
                                    "unique_lock that owns no mutex");
        return lk.mutex()->native_handle();
    }

    /* A wait's result: no_timeout, timeout (both holding the mutex) or an
     * exception, lk released first when the thread no longer holds it. */
    template <class M>
    static std::cv_status done(std::unique_lock<M> &lk, int rc,
                               const char *call)
    {
        std::uint64_t t;

        if (rc == 0)
            return std::cv_status::no_timeout;
        if (rc == ETIMEDOUT)
            return std::cv_status::timeout;
        std::system_error e = detail::error(rc, call);
        if (dist_mutex_token(lk.mutex()->native_handle(), &t) != 0)
            lk.release();
        throw e;
    }
};

/* ------------------------------------------------------------------------ */

/* How a semaphore keeps its permits (dist_semattr_setmode). */
enum class semaphore_mode {
    leased = DIST_SEM_LEASED,    /* default: a permit is a hold of the
                                   * thread that acquired it, with a lease */
    redisson = DIST_SEM_REDISSON /* Redisson's RSemaphore layout */
};

/* How a counting_semaphore is made; the defaults are dist_semattr_init's. */
struct semaphore_options {
    semaphore_mode mode = semaphore_mode::leased;
    /* leased: 0, the watchdog lease renewed while held; otherwise each
     * permit ends this long after it was acquired unless released first */
    std::chrono::milliseconds lease{ 0 };
    /* leased: a thread that holds no permit may release, adding one (the
     * signalling use of a semaphore); otherwise such a release throws
     * EPERM */
    bool unowned_release = false;
};

/* A distributed counting semaphore named name (dist_sem_t) with
 * std::counting_semaphore's interface: release(n), acquire, try_acquire,
 * try_acquire_for, try_acquire_until, max().  LeastMaxValue is the most
 * free permits: a release past it throws EOVERFLOW.
 *
 * Differences from std::counting_semaphore.  The count lives in Redis: the
 * constructor's desired is the count of a semaphore that does not exist
 * yet, and one that exists keeps its own.  In the default leased mode a
 * permit belongs to the thread that acquired it: release gives back the
 * calling thread's permits, a release by a thread that holds none throws
 * EPERM unless semaphore_options::unowned_release is set, and a process
 * that dies gives its permits back when their leases end.  In Redisson
 * mode any thread may release and a dead holder's permits are lost, as
 * with Redisson.  try_acquire throws (EIO) instead of answering false
 * when Redis cannot be reached. */
template <std::ptrdiff_t LeastMaxValue = DIST_SEM_VALUE_MAX>
class counting_semaphore
    : public detail::c_object<dist_sem_t, dist_sem_destroy>
{
    static_assert(LeastMaxValue >= 1 && LeastMaxValue <= DIST_SEM_VALUE_MAX,
                  "LeastMaxValue must be 1 to DIST_SEM_VALUE_MAX");

  public:
    static constexpr std::ptrdiff_t max() noexcept
    {
        return LeastMaxValue;
    }

    /* No network I/O.  Throws EINVAL (desired outside 0..max(), a bad name
     * or option), ENOMEM. */
    counting_semaphore(const std::string &name, std::ptrdiff_t desired,
                       const semaphore_options &opts = semaphore_options())
        : c_object([&](dist_sem_t *s) { make(s, name, desired, opts); })
    {
    }

    /* Gives update permits back (see above), waking up to update waiters.
     * Throws EINVAL (update < 0), EPERM, EOVERFLOW, EIO. */
    void release(std::ptrdiff_t update = 1)
    {
        if (update < 0 || update > LeastMaxValue)
            throw std::system_error(update < 0 ? EINVAL : EOVERFLOW,
                                    std::generic_category(),
                                    "distlock: release of a count outside "
                                    "0..max()");
        detail::check(
            dist_sem_post_multiple(&c_, static_cast<unsigned>(update)),
            "dist_sem_post_multiple");
    }

    /* std::counting_semaphore's waits are not interrupted by a signal:
     * an EINTR of the C call (a handler without SA_RESTART, or any
     * handler during a timed wait) is a wait that goes on. */
    void acquire()
    {
        detail::check(detail::sem_wait_on(&c_), "dist_sem_wait");
    }

    /* Never waits: false when no permit is free. */
    bool try_acquire()
    {
        return detail::taken(dist_sem_trywait(&c_), EAGAIN,
                             "dist_sem_trywait");
    }

    /* Waits at most rel (steady clock); a free permit is taken even when
     * rel is zero or negative. */
    template <class Rep, class Period>
    bool try_acquire_for(const std::chrono::duration<Rep, Period> &rel)
    {
        return detail::taken_for(detail::sem_clockwait_on, &c_, rel,
                                 "dist_sem_clockwait");
    }

    /* Waits until tp on its clock (see "Deadlines" above). */
    template <class Clock, class Duration>
    bool try_acquire_until(const std::chrono::time_point<Clock, Duration> &tp)
    {
        return detail::taken_until(detail::sem_clockwait_on, &c_, tp,
                                   "dist_sem_clockwait");
    }

    /* Not in the standard: the free permits now (a snapshot), and a reset
     * of them (dist_sem_setvalue).  Throw EIO; set_value EINVAL past
     * max(). */
    std::ptrdiff_t value()
    {
        int v = 0;

        detail::check(dist_sem_getvalue(&c_, &v), "dist_sem_getvalue");
        return v;
    }

    void set_value(std::ptrdiff_t v)
    {
        if (v < 0 || v > LeastMaxValue)
            throw std::system_error(EINVAL, std::generic_category(),
                                    "distlock: a semaphore value outside "
                                    "0..max()");
        detail::check(dist_sem_setvalue(&c_, static_cast<unsigned>(v)),
                      "dist_sem_setvalue");
    }

  private:
    /* s set up as opts say, with desired free permits if it is new. */
    static void make(dist_sem_t *s, const std::string &name,
                     std::ptrdiff_t desired, const semaphore_options &opts)
    {
        dist_semattr_t a;

        if (desired < 0 || desired > LeastMaxValue)
            throw std::system_error(EINVAL, std::generic_category(),
                                    "distlock: a semaphore's desired count "
                                    "outside 0..max()");
        detail::check(dist_semattr_init(&a), "dist_semattr_init");
        detail::check(dist_semattr_setmode(&a, static_cast<int>(opts.mode)),
                      "dist_semattr_setmode");
        detail::check(dist_semattr_setlease(&a, detail::lease_ms(opts.lease)),
                      "dist_semattr_setlease");
        detail::check(
            dist_semattr_setunowned(&a, opts.unowned_release ? 1 : 0),
            "dist_semattr_setunowned");
        detail::check(
            dist_semattr_setmax(&a, static_cast<long>(LeastMaxValue)),
            "dist_semattr_setmax");
        detail::check(dist_sem_init(s, detail::c_name(name),
                                    static_cast<unsigned>(desired), &a),
                      "dist_sem_init");
        dist_semattr_destroy(&a);
    }
};

typedef counting_semaphore<1> binary_semaphore;

/* ------------------------------------------------------------------------ */

/* A distributed barrier named name (dist_barrier_t) for rounds of count
 * arrivals, every process giving the same count; reusable round after
 * round.  Only arrive_and_wait of std::barrier's interface: no completion
 * function, arrive or arrive_and_drop.  Instead, arrive_and_wait answers
 * true in exactly one caller per round (the last to arrive, where a
 * completion step can run).  A member whose process dies breaks the round
 * under way: the others' arrive_and_wait throws EOWNERDEAD (the round is
 * over for everyone; arrive again for the next). */
class barrier : public detail::c_object<dist_barrier_t, dist_barrier_destroy>
{
  public:
    /* No network I/O.  Throws EINVAL (bad name, count < 1), ENOMEM. */
    barrier(const std::string &name, std::ptrdiff_t count)
        : c_object([&](dist_barrier_t *b) { make(b, name, count); })
    {
    }

    /* Arrives and waits for the round's other arrivals: true in one caller
     * per round, false in the others.  Throws EOWNERDEAD, EINVAL (the
     * barrier exists with another count), EIO. */
    bool arrive_and_wait()
    {
        int rc = dist_barrier_wait(&c_);

        if (rc == DIST_BARRIER_SERIAL_THREAD)
            return true;
        detail::check(rc, "dist_barrier_wait");
        return false;
    }

  private:
    /* b set up for rounds of count arrivals. */
    static void make(dist_barrier_t *b, const std::string &name,
                     std::ptrdiff_t count)
    {
        if (count < 1 || count > static_cast<std::ptrdiff_t>(~0u >> 1))
            throw std::system_error(EINVAL, std::generic_category(),
                                    "distlock: a barrier count below 1 or "
                                    "too large");
        detail::check(dist_barrier_init(b, detail::c_name(name),
                                        static_cast<unsigned>(count)),
                      "dist_barrier_init");
    }
};

} /* namespace distlock */

#endif /* DISTLOCK_HPP */
