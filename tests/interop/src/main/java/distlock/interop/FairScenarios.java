package distlock.interop;

import static distlock.interop.Suite.WAKE_BOUND_MS;
import static distlock.interop.Suite.await;
import static distlock.interop.Suite.check;
import static distlock.interop.Suite.ms;
import static distlock.interop.Suite.sleep;
import static distlock.interop.Suite.stillBlocked;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;

/**
 * Scenario 4: RFairLock and the fair dist_mutex in one queue.  Redisson
 * keeps each waiter's deadline in the timeout ZSET as "the deadline of the
 * one ahead plus my wait time" and, when a waiter takes the lock, takes
 * its wait time off every deadline; distlock's waiters keep short
 * deadlines alive instead.  These scenarios check that the two agree.
 */
final class FairScenarios {
    /** distlock's waiter window in the scenarios with a dead waiter. */
    static final String WINDOW = "2000";
    /** The holder's lease where a Redisson waiter's retry bound matters. */
    static final String HOLDER_LEASE = "3000";
    /** A short lease, to see a hold renewed within a few seconds. */
    static final String HOLD_LEASE = "1500";

    private FairScenarios() {
    }

    static void fair(Suite s) throws Exception {
        mixedQueue(s, true);
        mixedQueue(s, false);
        deadRedissonWaiter(s);
        deadDistlockWaiter(s);
        droppedWaiter(s);
        stoppedWaiter(s);
    }

    /**
     * Waiters of both kinds queue behind a distlock holder, alternating;
     * each must be served in arrival order, each woken by the release
     * before it.  Returns nothing; records the hand-off times.
     */
    static void mixedQueue(Suite s, boolean javaFirst) throws Exception {
        String n = s.fresh("s4");
        Handle holder = s.cAgent("c-holder");
        List<Handle> order = new ArrayList<>();
        for (int i = 1; i <= 2; i++) {
            Handle j = s.javaThread("java-" + i);
            Handle c = s.cAgent("c-" + i);
            order.add(javaFirst ? j : c);
            order.add(javaFirst ? c : j);
        }
        holder.ok("flock " + n);
        Map<Handle, CompletableFuture<Handle.Reply>> waiting = new LinkedHashMap<>();
        for (Handle h : order) {
            waiting.put(h, h.send("flock " + n));
            s.queueReaches(n, waiting.size());
        }
        // some time for Redisson to take a lock, for renewals to run
        stillBlocked(waiting.get(order.get(0)), 2500, "the first waiter");
        Handle.Reply u = holder.ok("funlock " + n);
        List<String> served = new ArrayList<>();
        List<Double> handoff = new ArrayList<>();
        for (Handle expected : order) {
            Handle.Reply r = next(waiting, served, expected, n, s);
            handoff.add(ms(r.t1 - u.t0));
            check(handoff.get(handoff.size() - 1) < WAKE_BOUND_MS, expected.label
                    + " was served " + handoff.get(handoff.size() - 1) + " ms after the "
                    + "release: not woken by it");
            sleep(20);      // those behind must stay queued meanwhile
            u = expected.ok("funlock " + n);
        }
        check(s.queue(n).isEmpty() && !s.exists(n), "left behind: queue " + s.queue(n)
                + ", lock " + s.hash(n));
        s.figure("mixed fair queue, " + (javaFirst ? "Redisson" : "distlock")
                + " first: served in order " + served + "; release -> next waiter's "
                + "lock returns " + Suite.spread(handoff));
    }

    /** Waits for the next waiter to be served and checks it is the expected one. */
    static Handle.Reply next(Map<Handle, CompletableFuture<Handle.Reply>> waiting,
                             List<String> served, Handle expected, String n, Suite s) {
        long end = System.nanoTime() + 30_000_000_000L;
        while (System.nanoTime() < end) {
            for (Map.Entry<Handle, CompletableFuture<Handle.Reply>> e : waiting.entrySet()) {
                if (!e.getValue().isDone()) {
                    continue;
                }
                Handle.Reply r = e.getValue().join();
                served.add(e.getKey().label);
                check(r.ok(), e.getKey().label + ": " + r.line);
                check(e.getKey() == expected, "served out of order: " + served
                        + ", expected " + expected.label + " next");
                waiting.remove(e.getKey());
                return r;
            }
            sleep(1);
        }
        throw new AssertionError(expected.label + " was never served; served " + served
                + ", queue " + s.queue(n) + ", lock " + s.hash(n));
    }

    /**
     * A Redisson waiter dies in the queue ahead of a distlock waiter: the
     * distlock waiter takes the lock once the dead one's Redisson deadline
     * (its queueing time + the lease left then + its wait time) has passed.
     */
    static void deadRedissonWaiter(Suite s) throws Exception {
        String n = s.fresh("s4dj");
        Handle holder = s.cAgent("c-holder", "DISTLOCK_WATCHDOG_MS", "3000");
        Handle j = s.javaAgent("java-waiter");
        Handle c = s.cAgent("c-waiter", "DISTLOCK_WAITER_MS", WINDOW);
        holder.ok("flock " + n);
        CompletableFuture<Handle.Reply> jf = j.send("ftrylock " + n + " 6000");
        s.queueReaches(n, 1);
        CompletableFuture<Handle.Reply> cf = c.send("flock " + n);
        s.queueReaches(n, 2);
        String jo = s.queue(n).get(0);
        j.kill();
        holder.ok("funlock " + n);
        double deadline = s.timeoutScore(n, jo);
        Handle.Reply r = await(cf, 30000, "the distlock waiter behind a dead Redisson one");
        double at = System.currentTimeMillis();
        check(r.ok(), r.line);
        check(at >= deadline - 100 && at < deadline + WAKE_BOUND_MS, String.format(
                "the distlock waiter took the lock %.0f ms after the dead Redisson waiter's "
                + "deadline", at - deadline));
        c.ok("funlock " + n);
        s.figure(String.format("a SIGKILLed Redisson waiter (tryLock wait 6 s, lease 3 s) "
                + "stalls a distlock waiter until its Redisson deadline: served %.0f ms after "
                + "it", at - deadline));
    }

    /**
     * A distlock waiter dies in the queue ahead of a Redisson waiter: the
     * Redisson waiter takes the lock within the distlock waiter's window.
     */
    static void deadDistlockWaiter(Suite s) throws Exception {
        String n = s.fresh("s4dc");
        Handle holder = s.cAgent("c-holder", "DISTLOCK_WATCHDOG_MS", HOLDER_LEASE);
        Handle c = s.cAgent("c-waiter", "DISTLOCK_WAITER_MS", WINDOW);
        Handle j = s.javaThread("java-waiter");
        holder.ok("flock " + n);
        c.send("flock " + n);
        s.queueReaches(n, 1);
        CompletableFuture<Handle.Reply> jf = j.send("flock " + n);
        s.queueReaches(n, 2);
        sleep(1000);        // a renewal or two of the distlock waiter
        long t0 = System.nanoTime();
        c.kill();
        holder.ok("funlock " + n);
        Handle.Reply r = await(jf, 60000, "the Redisson waiter behind a dead distlock one");
        check(r.ok(), r.line);
        double took = ms(r.t1 - t0);
        // The dead waiter is purged once its window ends, but only a try
        // finds that out: 3.17.7 tries again at the deadline of the one
        // ahead (which the live waiter kept current); 3.52.0 sleeps for
        // the lease it last saw left (the release went to the dead head)
        long bound = Math.max(Long.parseLong(WINDOW), Long.parseLong(HOLDER_LEASE));
        check(took < bound + WAKE_BOUND_MS, String.format("the Redisson waiter behind a "
                + "dead distlock waiter was served %.0f ms after its death (window %s ms, "
                + "holder's lease %s ms)", took, WINDOW, HOLDER_LEASE));
        j.ok("funlock " + n);
        s.figure(String.format("a SIGKILLed distlock waiter (window %s ms; the holder's "
                + "lease %s ms) stalls a Redisson waiter behind it %.0f ms", WINDOW,
                HOLDER_LEASE, took));
    }

    /**
     * Two more seconds of pid's life, which must not burn a CPU (a waiter
     * that spins): its CPU seconds since cpu0, checked under 1.
     */
    static double notSpinning(long pid, double cpu0, String who) throws Exception {
        sleep(2000);
        double cpu = cpuSeconds(pid) - cpu0;
        check(cpu < 1.0, String.format("%s used %.2f s of CPU in about 2 s: it spins",
                who, cpu));
        return cpu;
    }

    /** CPU seconds (user + system) a process has used so far. */
    static double cpuSeconds(long pid) throws IOException {
        String st = new String(Files.readAllBytes(Paths.get("/proc/" + pid + "/stat")));
        String[] f = st.substring(st.lastIndexOf(')') + 2).split(" ");
        return (Long.parseLong(f[11]) + Long.parseLong(f[12])) / 100.0;
    }

    /**
     * A live distlock waiter whose queue entry disappears (removed by hand
     * here; Redisson's arithmetic could do it too) must queue again, at the
     * tail, and neither hang nor spin.
     */
    static void droppedWaiter(Suite s) throws Exception {
        String n = s.fresh("s4drop");
        Handle holder = s.cAgent("c-holder");
        Handle.Proc c1 = (Handle.Proc) s.cAgent("c-dropped", "DISTLOCK_WAITER_MS", WINDOW,
                "DISTLOCK_WATCHDOG_MS", HOLD_LEASE);
        Handle j = s.javaThread("java-waiter");
        holder.ok("flock " + n);
        CompletableFuture<Handle.Reply> f1 = c1.send("flock " + n);
        s.queueReaches(n, 1);
        CompletableFuture<Handle.Reply> fj = j.send("flock " + n);
        s.queueReaches(n, 2);
        String o1 = s.queue(n).get(0);
        s.admin.getList("redisson_lock_queue:{" + n + "}",
                org.redisson.client.codec.StringCodec.INSTANCE).remove(o1);
        s.admin.getScoredSortedSet("redisson_lock_timeout:{" + n + "}",
                org.redisson.client.codec.StringCodec.INSTANCE).remove(o1);
        double cpu0 = cpuSeconds(c1.pid);
        long end = System.nanoTime() + 10_000_000_000L;
        while (System.nanoTime() < end && !s.queue(n).contains(o1)) {
            sleep(20);
        }
        List<String> q = s.queue(n);
        check(q.size() == 2 && q.get(1).equals(o1), "the dropped waiter did not queue "
                + "again at the tail within 10 s: " + q);
        double cpu = notSpinning(c1.pid, cpu0, "the dropped waiter's process");
        holder.ok("funlock " + n);
        check(await(fj, 30000, "the Redisson waiter, now ahead").ok(), "");
        stillBlocked(f1, 200, "the requeued waiter");
        j.ok("funlock " + n);
        check(await(f1, 30000, "the requeued waiter").ok(), "");
        sleep(2 * Long.parseLong(HOLD_LEASE));
        check(s.exists(n), "the requeued waiter's hold was not renewed");
        c1.ok("funlock " + n);
        s.figure(String.format("a waiter dropped from the queue queues again at the tail; "
                + "its process used %.2f s of CPU meanwhile", cpu));
    }

    /**
     * A distlock waiter stopped (SIGSTOP) for longer than its window is
     * purged by the next try of another client; continued, it queues again
     * and gets the lock.
     */
    static void stoppedWaiter(Suite s) throws Exception {
        String n = s.fresh("s4stop");
        Handle holder = s.cAgent("c-holder");
        Handle.Proc c1 = (Handle.Proc) s.cAgent("c-stopped", "DISTLOCK_WAITER_MS", WINDOW);
        Handle j = s.javaThread("java-waiter");
        holder.ok("flock " + n);
        CompletableFuture<Handle.Reply> f1 = c1.send("flock " + n);
        s.queueReaches(n, 1);
        signal("STOP", c1.pid);
        try {
            sleep(Long.parseLong(WINDOW) + 1000);
            // Redisson's try purges the stopped waiter from the head
            check(j.call("ftrylock " + n + " 0").status.equals("busy"), "");
            check(s.queue(n).isEmpty(), "the stopped waiter was not purged: " + s.queue(n));
        } finally {
            signal("CONT", c1.pid);
        }
        s.queueReaches(n, 1);
        notSpinning(c1.pid, cpuSeconds(c1.pid), "the continued waiter's process");
        holder.ok("funlock " + n);
        check(await(f1, 30000, "the continued waiter").ok(), "");
        c1.ok("funlock " + n);
    }

    static void signal(String sig, long pid) throws Exception {
        Process p = new ProcessBuilder("kill", "-" + sig, Long.toString(pid)).start();
        check(p.waitFor() == 0, "kill -" + sig + " " + pid);
    }
}
