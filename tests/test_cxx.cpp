/*
 * test_cxx: distlock.hpp against a private redis-server: the standard
 * lock types over distlock's mutexes (lock_guard, unique_lock,
 * shared_lock, scoped_lock over two locks taken in opposite orders by two
 * processes, condition_variable_any), try_lock answering false for a lock
 * another process holds, errors as std::system_error, deadlines on the
 * steady, system and a third clock, and a steady deadline that a step of
 * the wall clock does not move (clock_hook.c); condition_variable
 * (cross-process notify_one and notify_all, timed waits on each clock),
 * counting_semaphore (the bound over four processes, try and timed
 * acquires, release errors, the unowned and Redisson modes) and barrier
 * rounds across two processes.
 *
 * C++17, plain checks (no framework): each case prints "ok NAME"; the
 * first failed check prints where and exits 1.  Time bounds are lower
 * bounds from the deadlines and upper bounds that hold on a loaded 2-core
 * machine.
 */
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <system_error>
#include <thread>

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "distlock.hpp"
#include "harness_server.h"
#include "clock_hook.h"

using namespace std::chrono_literals;
using std::chrono::steady_clock;
using std::chrono::system_clock;

#define CHECK(cond)                                                          \
    do {                                                                     \
        if (!(cond)) {                                                       \
            std::fprintf(stderr, "%s:%d: %s: check failed: %s\n", __FILE__,  \
                         __LINE__, __func__, #cond);                         \
            std::exit(1);                                                    \
        }                                                                    \
    } while (0)

/* expr throws std::system_error with errno value err and a what() that
 * names the C call or the library */
#define CHECK_THROWS(expr, err)                                              \
    do {                                                                     \
        int caught_ = 0;                                                     \
        try {                                                                \
            expr;                                                            \
        } catch (const std::system_error &e_) {                              \
            caught_ = 1;                                                     \
            if (e_.code() !=                                                 \
                std::error_code(err, std::generic_category())) {             \
                std::fprintf(stderr, "%s:%d: %s threw %s (%d), not %s\n",    \
                             __FILE__, __LINE__, #expr, e_.what(),           \
                             e_.code().value(), #err);                       \
                std::exit(1);                                                \
            }                                                                \
            CHECK(std::strstr(e_.what(), "dist") != nullptr);                \
        }                                                                    \
        CHECK(caught_);                                                      \
    } while (0)

static tu_redis_t r;

static std::string name_of(const char *test, const char *tag)
{
    return std::string("test_cxx:") + test + ":" + tag + ":" +
           std::to_string(static_cast<long>(getpid()));
}

static double secs_since(steady_clock::time_point t0)
{
    return std::chrono::duration<double>(steady_clock::now() - t0).count();
}

/* ---- a lock held by another process ------------------------------------------ */

/* A child process that runs body(wait): body takes a lock, calls wait()
 * (which tells the parent and returns when the parent says let go), and
 * gives it back; then the child exits 0. */
struct other_holder {
    pid_t pid = -1;
    int to_child = -1;

    template <class Body> void start(Body body)
    {
        int up[2], down[2];
        char c;

        CHECK(pipe(up) == 0 && pipe(down) == 0);
        pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            close(up[0]);
            close(down[1]);
            body([&] {
                char x = 'L';
                if (write(up[1], &x, 1) != 1 || read(down[0], &x, 1) != 1)
                    _exit(3);
            });
            _exit(0);
        }
        close(up[1]);
        close(down[0]);
        to_child = down[1];
        CHECK(read(up[0], &c, 1) == 1 && c == 'L');
        close(up[0]);
    }

    /* Lets go and waits for the child, which must have given the lock
     * back and exited 0. */
    void stop()
    {
        char c = 'U';
        int st;

        CHECK(write(to_child, &c, 1) == 1);
        close(to_child);
        CHECK(waitpid(pid, &st, 0) == pid);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
};

/* The bodies: the mutex named n, or the write side of the rwlock. */
static auto hold_mutex(const std::string &n)
{
    return [n](auto wait) {
        distlock::mutex cm(n);
        std::lock_guard<distlock::mutex> g(cm);
        wait();
    };
}

static auto hold_write(const std::string &n)
{
    return [n](auto wait) {
        distlock::shared_mutex crw(n);
        std::lock_guard<distlock::shared_mutex> g(crw);
        wait();
    };
}

/* ---- cases ------------------------------------------------------------------- */

/* lock_guard and unique_lock in their forms; the token grows between holds
 * and is refused without one; errors come as system_error. */
static void test_guards()
{
    distlock::mutex m(name_of(__func__, "m"));
    std::uint64_t t1, t2;

    {
        std::lock_guard<distlock::mutex> g(m);
        t1 = m.token();
        /* surely ours for most of the 30 s watchdog lease */
        CHECK(m.lease_left() > std::chrono::seconds(15));
        CHECK(m.lease_left() <= std::chrono::seconds(30));
    }
    CHECK_THROWS(m.token(), EPERM);
    CHECK(m.lease_left() == std::chrono::nanoseconds::zero());
    {
        std::unique_lock<distlock::mutex> u(m, std::defer_lock);
        CHECK(!u.owns_lock());
        u.lock();
        t2 = m.token();
        CHECK(t2 > t1);
        /* recursive by default: the owner takes it again */
        CHECK(m.try_lock());
        m.unlock();
        u.unlock();
        std::unique_lock<distlock::mutex> u2(m, std::try_to_lock);
        CHECK(u2.owns_lock());
    }
    std::error_code ec;
    CHECK(!m.unlock(ec));
    CHECK(ec == std::errc::operation_not_permitted);

    distlock::mutex_options o;
    o.type = distlock::mutex_type::errorcheck;
    distlock::mutex ec_m(name_of(__func__, "errorcheck"), o);
    {
        std::lock_guard<distlock::mutex> g(ec_m);
        CHECK(!ec_m.try_lock()); /* EBUSY: false, no throw */
        CHECK_THROWS(ec_m.lock(), EDEADLK);
    }
    CHECK_THROWS(distlock::mutex(""), EINVAL);
    CHECK_THROWS(distlock::mutex(std::string("a\0b", 3)), EINVAL);
    o = distlock::mutex_options();
    o.lease = -1ms;
    CHECK_THROWS(distlock::mutex(name_of(__func__, "neg"), o), EINVAL);
}

/* A robust mutex whose holder died: lock_guard's lock throws owner_dead
 * with the lock held; consistent() and unlock() make it clean, and the
 * next lock_guard takes it as usual.  Unlocked without consistent(), the
 * next lock throws ENOTRECOVERABLE. */
static void test_robust_owner_dead()
{
    std::string n = name_of(__func__, "m");
    distlock::mutex_options o;
    other_holder h;
    int st;

    o.robust = true;
    o.lease = 500ms;
    distlock::mutex m(n, o);
    for (int round = 0; round < 2; round++) {
        h.start([n, o](auto wait) {
            distlock::mutex cm(n, o);
            cm.lock();
            wait();
        });
        kill(h.pid, SIGKILL); /* dies in its section */
        CHECK(waitpid(h.pid, &st, 0) == h.pid);
        close(h.to_child);
        bool told = false;
        try {
            std::lock_guard<distlock::mutex> g(m);
        } catch (const distlock::owner_dead &e) {
            told = e.code() == std::errc::owner_dead;
        }
        CHECK(told);
        if (round == 0) {
            m.consistent();
            CHECK_THROWS(m.consistent(), EINVAL);
            m.unlock();
            std::lock_guard<distlock::mutex> g(m); /* clean: no throw */
        } else {
            m.unlock(); /* not repaired */
            CHECK_THROWS(m.lock(), ENOTRECOVERABLE);
            CHECK_THROWS(m.try_lock(), ENOTRECOVERABLE);
        }
    }
    distlock::mutex plain(name_of(__func__, "plain"));
    plain.lock();
    CHECK_THROWS(plain.consistent(), EINVAL);
    plain.unlock();
}

/* try_lock is false, not an exception, for a lock another process holds;
 * the timed forms wait out their time; then the lock is free again. */
static void test_held_by_other_process()
{
    std::string mn = name_of(__func__, "m"), rn = name_of(__func__, "rw");
    distlock::timed_mutex m(mn);
    distlock::shared_mutex rw(rn);
    other_holder hm, hr;

    hm.start(hold_mutex(mn));
    hr.start(hold_write(rn));
    CHECK(!m.try_lock());
    auto t0 = steady_clock::now();
    CHECK(!m.try_lock_for(300ms));
    double el = secs_since(t0);
    CHECK(el >= 0.29 && el < 3.0);
    CHECK(!m.try_lock_until(system_clock::now() + 200ms));
    CHECK(!rw.try_lock());
    CHECK(!rw.try_lock_shared());
    t0 = steady_clock::now();
    CHECK(!rw.try_lock_shared_for(300ms));
    el = secs_since(t0);
    CHECK(el >= 0.29 && el < 3.0);
    CHECK(!rw.try_lock_until(steady_clock::now() + 100ms));

    /* the children give them back: free for the parent at once */
    hm.stop();
    hr.stop();
    CHECK(m.try_lock_for(10s));
    m.unlock();
    {
        std::shared_lock<distlock::shared_mutex> s(rw, std::try_to_lock);
        CHECK(s.owns_lock());
    }
}

/* Two processes take the same two locks in opposite orders with
 * std::scoped_lock: neither deadlocks, and the section stays exclusive. */
struct shared_counts {
    std::atomic<int> inside;
    std::atomic<int> overlaps;
    int counter;
};

static void scoped_worker(const std::string &an, const std::string &bn,
                          bool reverse, shared_counts *sh, int rounds)
{
    distlock::mutex a(an), b(bn);

    for (int i = 0; i < rounds; i++) {
        auto body = [sh] {
            if (sh->inside.fetch_add(1) != 0)
                sh->overlaps.fetch_add(1);
            int v = sh->counter;
            std::this_thread::sleep_for(1ms);
            sh->counter = v + 1;
            sh->inside.fetch_sub(1);
        };
        if (reverse) {
            std::scoped_lock lk(b, a);
            body();
        } else {
            std::scoped_lock lk(a, b);
            body();
        }
    }
}

static void test_scoped_lock_opposite_orders()
{
    const int rounds = 30;
    std::string an = name_of(__func__, "a"), bn = name_of(__func__, "b");
    void *p = mmap(nullptr, sizeof(shared_counts), PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(p != MAP_FAILED);
    shared_counts *sh = new (p) shared_counts();
    pid_t pids[2];

    for (int k = 0; k < 2; k++) {
        pids[k] = fork();
        CHECK(pids[k] >= 0);
        if (pids[k] == 0) {
            scoped_worker(an, bn, k == 1, sh, rounds);
            _exit(0);
        }
    }
    /* a deadlock would never end (the watchdog keeps both holds): give
     * up after a bound far above the few seconds this takes */
    auto t0 = steady_clock::now();
    int left = 2, st;
    while (left > 0) {
        for (int k = 0; k < 2; k++) {
            if (pids[k] > 0 && waitpid(pids[k], &st, WNOHANG) == pids[k]) {
                CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
                pids[k] = 0;
                left--;
            }
        }
        if (left > 0 && secs_since(t0) > 120) {
            for (int k = 0; k < 2; k++)
                if (pids[k] > 0) {
                    kill(pids[k], SIGKILL);
                    waitpid(pids[k], &st, 0);
                }
            std::fprintf(stderr, "scoped_lock: the two processes did not "
                                 "finish in 120 s: deadlocked\n");
            std::exit(1);
        }
        std::this_thread::sleep_for(20ms);
    }
    CHECK(sh->overlaps.load() == 0);
    CHECK(sh->counter == 2 * rounds);
    munmap(p, sizeof(shared_counts));
}

/* condition_variable_any waits with a distlock::mutex: the wait gives the
 * distributed lock back (the notifier takes it) and has it again after. */
static void test_condition_variable_any()
{
    distlock::mutex m(name_of(__func__, "m"));
    std::condition_variable_any cv;
    std::atomic<bool> ready(false), waiting(false);
    std::atomic<int> held_after(0);

    std::thread waiter([&] {
        std::unique_lock<distlock::mutex> lk(m);
        waiting = true;
        cv.wait(lk, [&] { return ready.load(); });
        held_after = m.token() != 0 ? 1 : -1;
    });
    while (!waiting)
        std::this_thread::sleep_for(1ms);
    {
        /* only possible while the waiter is inside wait() */
        std::lock_guard<distlock::mutex> g(m);
        ready = true;
    }
    cv.notify_all();
    waiter.join();
    CHECK(held_after == 1);

    /* no notifier: wait_for times out holding the lock again */
    std::unique_lock<distlock::mutex> lk(m);
    auto t0 = steady_clock::now();
    CHECK(cv.wait_for(lk, 200ms) == std::cv_status::timeout);
    CHECK(secs_since(t0) >= 0.19);
    CHECK(m.token() != 0);
}

/* shared_mutex: readers share it (with shared_lock), a writer is kept
 * out and keeps them out, no upgrade, the write token. */
static void test_shared_mutex()
{
    distlock::shared_mutex_options o;
    o.kind = distlock::rwlock_kind::prefer_writer;
    distlock::shared_mutex rw(name_of(__func__, "rw"), o);
    std::atomic<int> readers(0), peak(0), go(0);
    std::atomic<int> writer_try(-1);

    auto reader = [&] {
        std::shared_lock<distlock::shared_mutex> s(rw);
        int n = readers.fetch_add(1) + 1;
        int p = peak.load();
        while (n > p && !peak.compare_exchange_weak(p, n))
            ;
        while (!go)
            std::this_thread::sleep_for(1ms);
        readers.fetch_sub(1);
    };
    std::thread r1(reader), r2(reader);
    while (peak < 2)
        std::this_thread::sleep_for(1ms);
    std::thread w([&] { writer_try = rw.try_lock_for(100ms) ? 1 : 0; });
    w.join();
    CHECK(writer_try == 0);
    go = 1;
    r1.join();
    r2.join();
    CHECK(peak == 2);

    {
        std::unique_lock<distlock::shared_mutex> u(rw);
        std::uint64_t t = rw.token();
        CHECK(t > 0);
        CHECK(rw.lease_left() > std::chrono::seconds(15));
        std::atomic<int> rtry(-1);
        std::thread rt([&] { rtry = rw.try_lock_shared() ? 1 : 0; });
        rt.join();
        CHECK(rtry == 0);
    }
    {
        std::shared_lock<distlock::shared_mutex> s(rw);
        CHECK(!rw.try_lock()); /* no upgrade: false */
        CHECK_THROWS(rw.lock(), EDEADLK);
        CHECK_THROWS(rw.token(), EPERM);
        CHECK(rw.lease_left() > std::chrono::seconds(15)); /* read holds */
    }
    CHECK(rw.lease_left() == std::chrono::nanoseconds::zero());
}

/* A clock of its own, a second behind the steady clock, for the path of
 * try_lock_until that converts. */
struct lagging_clock {
    typedef steady_clock::duration duration;
    typedef duration::rep rep;
    typedef duration::period period;
    typedef std::chrono::time_point<lagging_clock> time_point;
    static constexpr bool is_steady = true;
    static time_point now()
    {
        return time_point(steady_clock::now().time_since_epoch() - 1s);
    }
};

/* try_lock_until on a clock that is neither steady_clock nor system_clock
 * waits until that clock's deadline. */
static void test_other_clock()
{
    std::string n = name_of(__func__, "m");
    distlock::timed_mutex m(n);
    other_holder h;

    h.start(hold_mutex(n));
    auto t0 = steady_clock::now();
    CHECK(!m.try_lock_until(lagging_clock::now() + 400ms));
    double el = secs_since(t0);
    CHECK(el >= 0.39 && el < 3.0);
    h.stop();
    /* free, with the deadline long past: taken anyway */
    distlock::timed_mutex f(name_of(__func__, "free"));
    CHECK(f.try_lock_until(lagging_clock::now() - 1h));
    f.unlock();
    CHECK(f.try_lock_for(-5s));
    f.unlock();
    CHECK(f.try_lock_for(std::chrono::hours::max()));
    f.unlock();
}

/* A steady deadline does not move when CLOCK_REALTIME is stepped: a 2 s
 * try_lock_for with the clock set back 5 s after 0.3 s still waits 2 s
 * (were it handed to the library as a wall-clock time it would wait 7 s).
 * A system_clock deadline does see a step back (2 s: it waits 4 s), which
 * shows that the step reaches the library.  A step forward ends neither
 * early (the library waits at most the time it was first given, then
 * looks at the clock), so it would tell nothing here. */
static double stepped_wait(distlock::timed_mutex &m, bool steady, double step)
{
    std::atomic<bool> started(false);
    std::thread stepper([&] {
        while (!started)
            std::this_thread::sleep_for(1ms);
        std::this_thread::sleep_for(300ms);
        clock_hook_step_realtime(step);
    });
    auto t0 = steady_clock::now();
    bool got;
    if (steady) {
        started = true;
        got = m.try_lock_for(2s);
    } else {
        auto dl = system_clock::now() + 2s;
        started = true;
        got = m.try_lock_until(dl);
    }
    double el = secs_since(t0);
    stepper.join();
    clock_hook_unstep_realtime();
    CHECK(!got);
    return el;
}

static void test_wall_clock_step()
{
    std::string n = name_of(__func__, "m");
    distlock::timed_mutex m(n);
    other_holder h;
    double el;

    h.start(hold_mutex(n));
    el = stepped_wait(m, true, -5.0);
    CHECK(el >= 1.99 && el < 2.0 + 1.5);
    el = stepped_wait(m, false, -2.0);
    CHECK(el >= 3.99 && el < 4.0 + 1.5);
    h.stop();
}

/* ---- condition_variable, counting_semaphore, barrier ------------------------------ */

/* Memory shared with forked children. */
template <class T> static T *shared_new()
{
    void *p = mmap(nullptr, sizeof(T), PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(p != MAP_FAILED);
    return new (p) T();
}

template <class T> static void shared_delete(T *p)
{
    p->~T();
    munmap(p, sizeof(T));
}

/* Waits for a child that must exit 0, at most limit seconds (then kills
 * it and fails: a hang). */
static void reap(pid_t pid, double limit)
{
    auto t0 = steady_clock::now();
    int st;

    for (;;) {
        pid_t got = waitpid(pid, &st, WNOHANG);
        CHECK(got >= 0);
        if (got == pid)
            break;
        if (secs_since(t0) > limit) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            std::fprintf(stderr, "child %ld still running after %.0f s\n",
                         static_cast<long>(pid), limit);
            std::exit(1);
        }
        std::this_thread::sleep_for(5ms);
    }
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

struct cv_shared {
    std::atomic<int> waiting; /* children inside their wait */
    std::atomic<int> items;   /* set under the distributed mutex */
    std::atomic<int> woken;
};

/* A child process: waits on cn with mn until items > 0, takes one, exits 0
 * (3 when the wait came back without the mutex). */
static void cv_child(const std::string &mn, const std::string &cn,
                     cv_shared *sh)
{
    distlock::mutex m(mn);
    distlock::condition_variable cv(cn);
    std::unique_lock<distlock::mutex> lk(m);

    sh->waiting.fetch_add(1);
    cv.wait(lk, [sh] { return sh->items.load() > 0; });
    if (!lk.owns_lock() || m.token() == 0)
        _exit(3);
    sh->items.fetch_sub(1);
    sh->woken.fetch_add(1);
}

static pid_t start_cv_child(const std::string &mn, const std::string &cn,
                            cv_shared *sh)
{
    pid_t pid = fork();

    CHECK(pid >= 0);
    if (pid == 0) {
        cv_child(mn, cn, sh);
        _exit(0);
    }
    return pid;
}

/* notify_one in this process wakes a waiter in another, notify_all wakes
 * two; the waiters hold the mutex when they see the item.  The parent
 * takes the mutex only once the children are inside wait() (they hold it
 * until then), so these are real cross-process wake-ups, not predicates
 * already true. */
/* Once n children wait, puts items under the distributed mutex m. */
static void put_when_waiting(distlock::mutex &m, cv_shared *sh, int n,
                             int items)
{
    while (sh->waiting.load() < n)
        std::this_thread::sleep_for(1ms);
    std::lock_guard<distlock::mutex> g(m);
    sh->items = items;
}

static void test_cv_cross_process()
{
    std::string mn = name_of(__func__, "m");
    std::string cn = "{" + mn + "}:ready";
    distlock::mutex m(mn);
    distlock::condition_variable cv(cn);
    cv_shared *sh = shared_new<cv_shared>();

    pid_t a = start_cv_child(mn, cn, sh);
    put_when_waiting(m, sh, 1, 1);
    cv.notify_one();
    reap(a, 30);
    CHECK(sh->woken == 1 && sh->items == 0);

    pid_t b = start_cv_child(mn, cn, sh), c = start_cv_child(mn, cn, sh);
    put_when_waiting(m, sh, 3, 2);
    cv.notify_all();
    reap(b, 30);
    reap(c, 30);
    CHECK(sh->woken == 3 && sh->items == 0);
    shared_delete(sh);
}

/* Timed waits with nobody to notify: wait_for, wait_until on the steady
 * and the system clock and the predicate forms end with timeout no sooner
 * than their deadline, holding the mutex; a wait without the lock is
 * EPERM; a wait_for that a notify from another process ends early. */
static void test_cv_timed()
{
    std::string mn = name_of(__func__, "m");
    std::string cn = "{" + mn + "}:c";
    distlock::timed_mutex m(mn);
    distlock::condition_variable cv(cn);
    std::unique_lock<distlock::timed_mutex> lk(m);

    auto t0 = steady_clock::now();
    CHECK(cv.wait_for(lk, 200ms) == std::cv_status::timeout);
    double el = secs_since(t0);
    CHECK(el >= 0.19 && el < 3.0 && m.token() != 0);
    t0 = steady_clock::now();
    CHECK(cv.wait_until(lk, steady_clock::now() + 200ms) ==
          std::cv_status::timeout);
    CHECK(secs_since(t0) >= 0.19 && m.token() != 0);
    auto sdl = system_clock::now() + 200ms;
    CHECK(cv.wait_until(lk, sdl) == std::cv_status::timeout);
    CHECK(system_clock::now() >= sdl && m.token() != 0);
    t0 = steady_clock::now();
    CHECK(!cv.wait_for(lk, 150ms, [] { return false; }));
    CHECK(secs_since(t0) >= 0.14 && lk.owns_lock());
    CHECK(cv.wait_for(lk, 1h, [] { return true; })); /* no wait at all */
    lk.unlock();
    CHECK_THROWS(cv.wait(lk), EPERM);
    CHECK_THROWS(cv.wait_for(lk, 10ms), EPERM);

    /* a notify from another process ends a long wait_for early */
    cv_shared *sh = shared_new<cv_shared>();
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        distlock::mutex cm(mn);
        distlock::condition_variable ccv(cn);
        while (sh->waiting.load() < 1)
            std::this_thread::sleep_for(1ms);
        {
            std::lock_guard<distlock::mutex> g(cm); /* the parent waits */
            sh->items = 1;
        }
        ccv.notify_one();
        _exit(0);
    }
    lk.lock();
    sh->waiting = 1;
    t0 = steady_clock::now();
    CHECK(cv.wait_for(lk, 60s, [sh] { return sh->items.load() > 0; }));
    CHECK(secs_since(t0) < 30.0 && m.token() != 0);
    lk.unlock();
    reap(pid, 30);
    shared_delete(sh);
}

/* A steady deadline of a condition wait does not move when the wall clock
 * is set back (the step is seen by the library: test_wall_clock_step). */
static void test_cv_wall_clock_step()
{
    std::string mn = name_of(__func__, "m");
    distlock::mutex m(mn);
    distlock::condition_variable cv("{" + mn + "}:c");
    std::unique_lock<distlock::mutex> lk(m);
    std::thread stepper([] {
        std::this_thread::sleep_for(300ms);
        clock_hook_step_realtime(-5.0);
    });
    auto t0 = steady_clock::now();
    std::cv_status st = cv.wait_for(lk, 2s);
    double el = secs_since(t0);
    stepper.join();
    clock_hook_unstep_realtime();
    CHECK(st == std::cv_status::timeout);
    CHECK(el >= 1.99 && el < 2.0 + 1.5);
}

struct sem_shared {
    std::atomic<int> inside;
    std::atomic<int> peak;
    std::atomic<int> rounds;
};

/* A child: rounds times acquire, stay a little while counting the holders
 * in shared memory, release. */
static void sem_child(const std::string &n, sem_shared *sh, int rounds)
{
    distlock::counting_semaphore<2> s(n, 2);

    for (int i = 0; i < rounds; i++) {
        s.acquire();
        int now = sh->inside.fetch_add(1) + 1;
        int p = sh->peak.load();
        while (now > p && !sh->peak.compare_exchange_weak(p, now))
            ;
        std::this_thread::sleep_for(3ms);
        sh->inside.fetch_sub(1);
        sh->rounds.fetch_add(1);
        s.release();
    }
}

/* Four processes share two permits: never more than two inside; the
 * permits are all free again at the end. */
static void test_semaphore_bound()
{
    const int procs = 4, rounds = 15;
    std::string n = name_of(__func__, "s");
    sem_shared *sh = shared_new<sem_shared>();
    pid_t pids[procs];

    for (int k = 0; k < procs; k++) {
        pids[k] = fork();
        CHECK(pids[k] >= 0);
        if (pids[k] == 0) {
            sem_child(n, sh, rounds);
            _exit(0);
        }
    }
    for (int k = 0; k < procs; k++)
        reap(pids[k], 120);
    CHECK(sh->rounds == procs * rounds);
    CHECK(sh->peak >= 1 && sh->peak <= 2);
    distlock::counting_semaphore<2> s(n, 2);
    CHECK(s.value() == 2);
    shared_delete(sh);
}

/* try_acquire answers false when nothing is free, the timed forms wait
 * out their time on each clock; a release by a thread without a permit
 * (leased) is EPERM, past max() EOVERFLOW; the unowned option and the
 * Redisson mode let another thread release. */
static void test_semaphore_calls()
{
    std::string n = name_of(__func__, "s");
    distlock::counting_semaphore<2> s(n, 1);
    static_assert(distlock::counting_semaphore<2>::max() == 2, "max()");

    CHECK(s.try_acquire());
    CHECK(!s.try_acquire());
    auto t0 = steady_clock::now();
    CHECK(!s.try_acquire_for(200ms));
    double el = secs_since(t0);
    CHECK(el >= 0.19 && el < 3.0);
    auto sdl = system_clock::now() + 150ms;
    CHECK(!s.try_acquire_until(sdl));
    CHECK(system_clock::now() >= sdl);
    CHECK(!s.try_acquire_until(steady_clock::now() + 100ms));
    CHECK(!s.try_acquire_until(lagging_clock::now() + 100ms));
    std::thread other([&] { CHECK_THROWS(s.release(), EPERM); });
    other.join();
    s.release(); /* the permit it holds */
    CHECK(s.value() == 1);
    CHECK_THROWS(s.release(), EPERM); /* it holds none now */
    CHECK(s.try_acquire_for(-1s));    /* free: taken at once */
    s.release();
    s.set_value(2);
    CHECK(s.value() == 2);
    CHECK_THROWS(s.release(3), EOVERFLOW);

    distlock::semaphore_options o;
    o.unowned_release = true;
    distlock::binary_semaphore sig(name_of(__func__, "sig"), 0, o);
    std::thread poster([&] {
        std::this_thread::sleep_for(100ms);
        sig.release();
    });
    t0 = steady_clock::now();
    CHECK(sig.try_acquire_for(30s));
    CHECK(secs_since(t0) >= 0.09);
    poster.join();
    CHECK_THROWS(sig.release(2), EOVERFLOW);
    sig.release(); /* its own permit back: destroyed unheld */
    CHECK(sig.value() == 1);

    o = distlock::semaphore_options();
    o.mode = distlock::semaphore_mode::redisson;
    distlock::counting_semaphore<> rs(name_of(__func__, "redisson"), 3, o);
    rs.acquire();
    CHECK(rs.value() == 2);
    std::thread rel([&] { rs.release(); }); /* any thread may */
    rel.join();
    CHECK(rs.value() == 3);
}

/* Two processes (this and a child) meet at a barrier of 2 for three
 * rounds: each round exactly one of them is told it is the serial one. */
static void test_barrier_rounds()
{
    const int rounds = 3;
    std::string n = name_of(__func__, "b");
    struct counts {
        std::atomic<int> serial[rounds];
    };
    counts *sh = shared_new<counts>();

    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        distlock::barrier b(n, 2);
        for (int i = 0; i < rounds; i++)
            if (b.arrive_and_wait())
                sh->serial[i].fetch_add(1);
        _exit(0);
    }
    {
        distlock::barrier b(n, 2);
        for (int i = 0; i < rounds; i++)
            if (b.arrive_and_wait())
                sh->serial[i].fetch_add(1);
    }
    reap(pid, 60);
    for (int i = 0; i < rounds; i++)
        CHECK(sh->serial[i] == 1);
    CHECK_THROWS(distlock::barrier(n, 0), EINVAL);
    shared_delete(sh);
}

int main()
{
    signal(SIGPIPE, SIG_IGN);
    if (tu_redis_start(&r) != 0)
        return 1;
    CHECK(dist_set_url(r.url_unix) == 0);
    struct {
        const char *name;
        void (*fn)();
    } cases[] = {
        { "guards", test_guards },
        { "robust_owner_dead", test_robust_owner_dead },
        { "held_by_other_process", test_held_by_other_process },
        { "scoped_lock_opposite_orders", test_scoped_lock_opposite_orders },
        { "condition_variable_any", test_condition_variable_any },
        { "shared_mutex", test_shared_mutex },
        { "other_clock", test_other_clock },
        { "wall_clock_step", test_wall_clock_step },
        { "cv_cross_process", test_cv_cross_process },
        { "cv_timed", test_cv_timed },
        { "cv_wall_clock_step", test_cv_wall_clock_step },
        { "semaphore_bound", test_semaphore_bound },
        { "semaphore_calls", test_semaphore_calls },
        { "barrier_rounds", test_barrier_rounds },
    };
    const char *only = std::getenv("TEST_CXX_FILTER");
    for (auto &c : cases) {
        if (only && *only && std::strcmp(only, c.name) != 0)
            continue;
        c.fn();
        std::printf("ok %s\n", c.name);
        std::fflush(stdout);
    }
    dist_shutdown();
    tu_redis_stop(&r);
    return 0;
}
