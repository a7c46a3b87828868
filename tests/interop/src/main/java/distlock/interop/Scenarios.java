package distlock.interop;

import static distlock.interop.Suite.WAKE_BOUND_MS;
import static distlock.interop.Suite.await;
import static distlock.interop.Suite.check;
import static distlock.interop.Suite.ms;
import static distlock.interop.Suite.sleep;
import static distlock.interop.Suite.stillBlocked;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;

import org.redisson.client.codec.StringCodec;

/** Scenarios 1-3, 5-7 and 9 (the fair lock's are in FairScenarios). */
final class Scenarios {
    private Scenarios() {
    }

    /** The "client X, thread Y" text `distlock status` shows for an owner. */
    static String holderText(String owner) {
        int colon = owner.lastIndexOf(':');
        return "client " + owner.substring(0, colon) + ", thread " + owner.substring(colon + 1);
    }

    /** The one field of a lock hash held by one owner. */
    static Map.Entry<String, String> onlyHolder(Suite s, String n) {
        Map<String, String> h = s.hash(n);
        check(h.size() == 1, n + " should have one holder: " + h);
        return h.entrySet().iterator().next();
    }

    static boolean busy(Handle h, String cmd) {
        return h.call(cmd).status.equals("busy");
    }

    // ---- 1 ------------------------------------------------------------------

    /** RLock and dist_mutex: exclusion both ways, reentrancy, no foreign unlock. */
    static void mutualExclusion(Suite s) throws Exception {
        String n = s.fresh("s1");
        Handle j = s.javaThread("java");
        Handle c = s.cAgent("c");
        String jo = j.ok("owner").value;

        j.ok("lock " + n);
        check(busy(c, "trylock " + n + " 0"), "distlock took a lock Redisson holds");
        check(s.hash(n).equals(Map.of(jo, "1")), "Redisson's hold: " + s.hash(n));
        String st = s.status(n);
        check(st.contains(holderText(jo)), "distlock status does not name the Redisson "
                + "holder " + jo + ":\n" + st);
        Handle.Reply u = c.call("unlock " + n);
        check(u.status.equals("err") && u.value.startsWith("1 "),
                "distlock's unlock of a Redisson hold should be EPERM: " + u.line);
        check(s.hash(n).equals(Map.of(jo, "1")), "a refused unlock changed " + s.hash(n));
        j.ok("lock " + n);
        check(s.hash(n).equals(Map.of(jo, "2")), "Redisson reentry: " + s.hash(n));
        j.ok("unlock " + n);
        check(busy(c, "trylock " + n + " 0"), "free after one of two Redisson unlocks");
        j.ok("unlock " + n);
        check(!s.exists(n), "Redisson's last unlock left " + s.hash(n));

        c.ok("lock " + n);
        c.ok("lock " + n);
        Map.Entry<String, String> ch = onlyHolder(s, n);
        check(ch.getValue().equals("2"), "distlock reentry: " + s.hash(n));
        check(busy(j, "trylock " + n + " 0"), "Redisson took a lock distlock holds");
        Handle.Reply ju = j.call("unlock " + n);
        check(ju.status.equals("err"), "Redisson unlocked distlock's hold: " + ju.line);
        check(s.hash(n).equals(Map.of(ch.getKey(), "2")), "a refused unlock changed "
                + s.hash(n));
        st = s.status(n);
        check(st.contains(holderText(ch.getKey())), "status: " + st);
        c.ok("unlock " + n);
        check(busy(j, "trylock " + n + " 0"), "free after one of two distlock unlocks");
        c.ok("unlock " + n);
        check(!s.exists(n), "distlock's last unlock left " + s.hash(n));
        j.ok("trylock " + n + " 0");
        j.ok("unlock " + n);
    }

    // ---- 2 ------------------------------------------------------------------

    /**
     * f, a lock call sent, stays blocked (what it is) until unlocker's
     * unlock; the time from the start of the unlock to f returning (ms),
     * which a release message, not the lease, must explain.
     */
    static double wokenBy(CompletableFuture<Handle.Reply> f, String blocked,
                          Handle unlocker, String unlock, String who) {
        stillBlocked(f, 300, blocked);
        Handle.Reply u = unlocker.ok(unlock);
        Handle.Reply r = await(f, 40000, who);
        check(r.ok(), who + ": " + r.line);
        double lat = ms(r.t1 - u.t0);
        check(lat < WAKE_BOUND_MS, String.format("%s woken %.0f ms after the unlock: "
                + "not by the release message", who, lat));
        return lat;
    }

    /**
     * One wake-up: holder holds, waiter blocks, holder unlocks; the time
     * from the start of the unlock to the waiter's lock returning (ms).
     */
    static double wake(Handle holder, String hlock, String hunlock,
                       Handle waiter, String wlock, String what) {
        holder.ok(hlock);
        return wokenBy(waiter.send(wlock), what, holder, hunlock, what);
    }

    /**
     * On a cluster: while a Redisson waiter waits, the lock's channel has
     * subscribers of the kind this Redisson line uses there (INTEROP_PUBSUB:
     * sharded since 3.22, plain before) and none of the other kind; while a
     * distlock waiter waits, subscribers of both kinds (its default,
     * pubsub=both), so that each side hears the other's releases whichever
     * kind the Redisson line uses.
     */
    static void pubsubKinds(Suite s, String n, Handle j, Handle c) throws Exception {
        boolean sharded = !Suite.envOr("INTEROP_PUBSUB", "sharded").equals("plain");
        String chan = "redisson_lock__channel:{" + n + "}";
        Handle[][] pairs = { { c, j }, { j, c } };
        for (Handle[] p : pairs) {
            p[0].ok("lock " + n);
            CompletableFuture<Handle.Reply> f = p[1].send("lock " + n);
            stillBlocked(f, 300, p[1].label + "'s lock");
            long shard = s.subscribers("SHARDNUMSUB", chan);
            long plain = s.subscribers("NUMSUB", chan);
            boolean distlock = p[1] == c;
            boolean ok = distlock ? shard >= 1 && plain >= 1
                    : sharded ? shard >= 1 && plain == 0 : plain >= 1 && shard == 0;
            check(ok, String.format("%s waiting: %d sharded and %d plain subscribers of %s, "
                            + "expected %s", p[1].label, shard, plain, chan,
                            distlock ? "both kinds" : sharded ? "sharded ones only"
                                    : "plain ones only"));
            p[0].ok("unlock " + n);
            check(await(f, 40000, p[1].label + "'s lock").ok(), p[1].label + "'s lock");
            p[1].ok("unlock " + n);
        }
        s.figure("Redisson waits with " + (sharded ? "SSUBSCRIBE" : "SUBSCRIBE")
                + " and releases with " + (sharded ? "SPUBLISH" : "PUBLISH")
                + "; distlock (pubsub=both) waits with SSUBSCRIBE and SUBSCRIBE and "
                + "releases with SPUBLISH and PUBLISH");
    }

    static void wakeUps(Suite s) throws Exception {
        String n = s.fresh("s2");
        Handle j = s.javaThread("java");
        Handle c = s.cAgent("c");
        if (s.cluster) {
            pubsubKinds(s, n, j, c);
        }
        List<Double> toC = new ArrayList<>(), toJ = new ArrayList<>();
        for (int i = 0; i < 7; i++) {
            toC.add(wake(j, "lock " + n, "unlock " + n, c, "lock " + n,
                    "a distlock waiter after Redisson's unlock"));
            c.ok("unlock " + n);
            toJ.add(wake(c, "lock " + n, "unlock " + n, j, "lock " + n,
                    "a Redisson waiter after distlock's unlock"));
            j.ok("unlock " + n);
        }
        s.figure("RLock unlock -> dist_mutex_lock returns: " + Suite.spread(toC));
        s.figure("dist_mutex_unlock -> RLock.lock returns: " + Suite.spread(toJ));
    }

    // ---- 3 ------------------------------------------------------------------

    static final String LEASE = "2500";

    /** The holder keeps it past several leases; killed, it frees it within one. */
    static double killHolder(Suite s, String n, Handle holder, Handle other) {
        holder.ok("lock " + n);
        long lease = Long.parseLong(LEASE);
        for (int i = 0; i < 4; i++) {
            sleep(lease);
            check(s.exists(n) && busy(other, "trylock " + n + " 0"),
                    holder.label + "'s hold ran out after " + (i + 1) + " leases");
        }
        CompletableFuture<Handle.Reply> f = other.send("lock " + n);
        stillBlocked(f, 200, other.label + "'s lock");
        long t0 = System.nanoTime();
        holder.kill();
        Handle.Reply r = await(f, lease + 20000, other.label + " after the SIGKILL");
        check(r.ok(), r.line);
        double took = ms(r.t1 - t0);
        check(took < lease + WAKE_BOUND_MS, String.format("the lock came free %.0f ms "
                + "after the SIGKILL, the lease is %s ms", took, LEASE));
        return took;
    }

    static void watchdog(Suite s) throws Exception {
        String n = s.fresh("s3");
        Handle jk = s.javaAgent("java-holder", "INTEROP_WATCHDOG_MS", LEASE);
        Handle c = s.cAgent("c", "DISTLOCK_WATCHDOG_MS", LEASE);
        double a = killHolder(s, n, jk, c);
        Handle j2 = s.javaAgent("java-2", "INTEROP_WATCHDOG_MS", LEASE);
        double b = killHolder(s, n, c, j2);
        j2.ok("unlock " + n);
        s.figure(String.format("lease %s ms: SIGKILLed Redisson holder -> distlock takes it "
                + "%.0f ms later; SIGKILLed distlock holder -> Redisson takes it %.0f ms "
                + "later", LEASE, a, b));
    }

    // ---- 5 ------------------------------------------------------------------

    static void readWrite(Suite s) throws Exception {
        String n = s.fresh("s5");
        Handle j = s.javaThread("java");
        Handle c = s.cAgent("c");
        Handle c2 = s.cAgent("c-2");
        List<Double> lat = new ArrayList<>();

        // readers of both kinds together; a writer of either kind waits
        j.ok("rlock " + n);
        c.ok("rlock " + n);
        check("read".equals(s.hash(n).get("mode")) && s.hash(n).size() == 3,
                "two readers: " + s.hash(n));
        CompletableFuture<Handle.Reply> w = c2.send("wlock " + n);
        stillBlocked(w, 300, "a distlock writer while two readers hold");
        j.ok("runlock " + n);
        stillBlocked(w, 200, "a distlock writer while a distlock reader holds");
        c.ok("rwunlock " + n);
        Handle.Reply r = await(w, 40000, "the distlock writer");
        check(r.ok(), r.line);

        // a distlock writer excludes Redisson readers, whose wake-up it sends
        check(busy(j, "tryrlock " + n + " 0"), "a Redisson reader entered beside a writer");
        lat.add(wokenBy(j.send("rlock " + n), "a Redisson reader while distlock writes",
                c2, "rwunlock " + n, "the Redisson reader"));

        // a Redisson reader keeps a distlock writer out until it leaves
        lat.add(wokenBy(c.send("wlock " + n), "a distlock writer while Redisson reads",
                j, "runlock " + n, "the distlock writer after Redisson's read unlock"));
        c.ok("rwunlock " + n);

        // a Redisson writer excludes distlock readers and wakes them
        j.ok("wlock " + n);
        check(busy(c, "tryrlock " + n + " 0"), "a distlock reader entered beside a writer");
        lat.add(wokenBy(c.send("rlock " + n), "a distlock reader while Redisson writes",
                j, "wunlock " + n, "the distlock reader"));
        c.ok("rwunlock " + n);
        check(!s.exists(n), "left behind: " + s.hash(n));
        s.figure("rwlock wake-ups across clients (write unlock -> reader, read unlock -> "
                + "writer): " + Suite.spread(lat));

        downgrades(s, n, j, c);
        writerPreference(s, j, c, c2);
    }

    /** Write-then-read reentrancy and downgrade, as each side allows. */
    static void downgrades(Suite s, String n, Handle j, Handle c) throws Exception {
        // distlock: write, read, unlock (the write hold) = downgrade, which
        // wakes a Redisson reader blocked meanwhile
        c.ok("wlock " + n);
        CompletableFuture<Handle.Reply> jr = j.send("rlock " + n);
        stillBlocked(jr, 300, "a Redisson reader while distlock writes");
        c.ok("rlock " + n);
        Handle.Reply u = c.ok("rwunlock " + n);
        check("read".equals(s.hash(n).get("mode")), "distlock's downgrade: " + s.hash(n));
        Handle.Reply r = await(jr, 40000, "the Redisson reader after distlock's downgrade");
        double d1 = ms(r.t1 - u.t0);
        check(d1 < WAKE_BOUND_MS, "Redisson reader woken late by the downgrade");
        check(busy(j, "trywlock " + n + " 0"), "Redisson wrote beside readers");
        j.ok("runlock " + n);
        c.ok("rwunlock " + n);
        check(!s.exists(n), "left behind: " + s.hash(n));

        // Redisson: the same downgrade; it publishes nothing, so a distlock
        // reader blocked meanwhile enters at its bounded retry (the lease)
        Handle jk = s.javaAgent("java-writer", "INTEROP_WATCHDOG_MS", LEASE);
        jk.ok("wlock " + n);
        jk.ok("wlock " + n);
        check(s.hash(n).containsValue("2"), "Redisson write reentry: " + s.hash(n));
        jk.ok("wunlock " + n);
        CompletableFuture<Handle.Reply> cr = c.send("rlock " + n);
        stillBlocked(cr, 300, "a distlock reader while Redisson writes");
        jk.ok("rlock " + n);
        u = jk.ok("wunlock " + n);
        check("read".equals(s.hash(n).get("mode")), "Redisson's downgrade: " + s.hash(n));
        r = await(cr, Long.parseLong(LEASE) + 20000, "the distlock reader after "
                + "Redisson's downgrade");
        double d2 = ms(r.t1 - u.t0);
        check(busy(c, "trywlock " + n + " 0"), "distlock wrote beside a reader");
        c.ok("rwunlock " + n);
        jk.ok("runlock " + n);
        check(!s.exists(n), "left behind: " + s.hash(n));
        s.figure(String.format("downgrade: distlock's wakes a blocked Redisson reader in "
                + "%.1f ms; Redisson's (no message) lets a blocked distlock reader in "
                + "after %.0f ms (lease %s ms)", d1, d2, LEASE));
    }

    /**
     * distlock's writer preference is an extension Redisson does not know:
     * its readers still enter while a distlock writer waits, and nothing of
     * the extension's key gets in their way.
     */
    static void writerPreference(Suite s, Handle j, Handle c, Handle c2)
            throws Exception {
        String n = s.fresh("s5p");
        Handle pw = s.cAgent("c-prefer-writer", "INTEROP_RW_PREFER_WRITER", "1");
        c.ok("rlock " + n);
        CompletableFuture<Handle.Reply> w = pw.send("wlock " + n);
        stillBlocked(w, 300, "a writer-preferring distlock writer");
        check(s.exists("distlock_rwlock_writers:{" + n + "}"), "no waiting writer recorded");
        check(busy(c2, "tryrlock " + n + " 0"), "a new distlock reader entered while a "
                + "writer-preferring writer waits");
        j.ok("rlock " + n);                 // Redisson's reader ignores the preference
        j.ok("runlock " + n);
        c.ok("rwunlock " + n);
        Handle.Reply r = await(w, 40000, "the writer-preferring writer");
        check(r.ok(), r.line);
        pw.ok("rwunlock " + n);
        check(!s.exists(n), "left behind: " + s.hash(n));
    }

    // ---- 6 ------------------------------------------------------------------

    static boolean hasFencedLock(Suite s) {
        try {
            s.admin.getClass().getMethod("getFencedLock", String.class);
            return true;
        } catch (NoSuchMethodException e) {
            return false;
        }
    }

    static void fencing(Suite s) throws Exception {
        String n = s.fresh("s6");
        String tokenKey = "redisson_lock_token:{" + n + "}";
        Handle j = s.javaThread("java");
        Handle c = s.cAgent("c");
        long last = 0;
        List<String> seen = new ArrayList<>();
        boolean fenced = hasFencedLock(s);
        for (int i = 0; i < 10; i++) {
            c.ok("lock " + n);
            long t = Long.parseLong(c.ok("token " + n).value);
            check(t > last, "distlock token " + t + " after " + seen);
            seen.add("c" + t);
            last = t;
            c.ok("unlock " + n);
            if (fenced) {
                t = Long.parseLong(j.ok("xlock " + n).value);
                check(t > last, "RFencedLock token " + t + " after " + seen);
                seen.add("j" + t);
                last = t;
                j.ok("xunlock " + n);
            } else {
                // no RFencedLock in this line: RLock leaves the counter alone
                String before = s.admin.getBucket(tokenKey, StringCodec.INSTANCE).get()
                        .toString();
                j.ok("lock " + n);
                j.ok("unlock " + n);
                check(before.equals(s.admin.getBucket(tokenKey, StringCodec.INSTANCE)
                        .get().toString()), "RLock changed the fencing counter");
            }
        }
        s.figure((fenced ? "tokens alternating distlock/RFencedLock, strictly rising: "
                : "no RFencedLock in this line; distlock's tokens rising, RLock leaves "
                + "the counter alone: ") + seen);
    }

    // ---- 7 ------------------------------------------------------------------

    static void counter(Suite s) throws Exception {
        String n = s.fresh("s7");
        String key = n + ":counter";
        int each = 500;
        List<Handle> hs = new ArrayList<>();
        hs.add(s.javaAgent("java-1"));
        hs.add(s.javaAgent("java-2"));
        hs.add(s.cAgent("c-1"));
        hs.add(s.cAgent("c-2"));
        long t0 = System.nanoTime();
        List<CompletableFuture<Handle.Reply>> fs = new ArrayList<>();
        for (Handle h : hs) {
            fs.add(h.send("count " + n + " " + key + " " + each));
        }
        for (int i = 0; i < fs.size(); i++) {
            Handle.Reply r = await(fs.get(i), 180000, hs.get(i).label + "'s increments");
            check(r.ok(), hs.get(i).label + ": " + r.line);
        }
        double secs = (System.nanoTime() - t0) / 1e9;
        Object v = s.admin.getBucket(key, StringCodec.INSTANCE).get();
        check(String.valueOf(4 * each).equals(String.valueOf(v)),
                "counter " + v + ", expected " + 4 * each);
        s.figure(String.format("2 Redisson + 2 distlock processes, %d GET/SET increments "
                + "each under one lock: %s, exact, in %.1f s", each, v, secs));
    }

    // ---- 9 ------------------------------------------------------------------

    /**
     * RSemaphore and a Redisson-mode dist_sem_t share the permits: the
     * count in the plain key both ways, a try refused on both sides when
     * none is free, and a blocked acquire on each side woken by the other
     * side's release message, not by a timeout.
     */
    static void semaphore(Suite s) throws Exception {
        String n = s.fresh("s9");
        Handle j = s.javaThread("java");
        Handle c = s.cAgent("c");

        j.ok("ssetpermits " + n + " 2");
        check("2".equals(s.get(n)), "RSemaphore's count: " + s.get(n));
        check(c.ok("svalue " + n).value.equals("2"), "distlock reads the permits");
        c.ok("sacquire " + n + " 0");
        check("1".equals(s.get(n)), "distlock took one: " + s.get(n));
        check(j.ok("svalue " + n).value.equals("1"), "Redisson reads the permits");
        j.ok("sacquire " + n + " 0");
        check(busy(c, "sacquire " + n + " 0"), "distlock took a permit none had");
        check(busy(j, "sacquire " + n + " 0"), "Redisson took a permit none had");
        check("0".equals(s.get(n)), "none left: " + s.get(n));

        double cj = wokenBy(c.send("sacquire " + n + " 30000"),
                "distlock's acquire with no permit", j, "srelease " + n,
                "distlock woken by Redisson's release");
        double jc = wokenBy(j.send("sacquire " + n + " 30000"),
                "Redisson's acquire with no permit", c, "srelease " + n,
                "Redisson woken by distlock's release");
        check("0".equals(s.get(n)), "after two hand-overs: " + s.get(n));
        c.ok("srelease " + n);
        j.ok("srelease " + n);
        check("2".equals(s.get(n)), "both given back: " + s.get(n));
        s.figure(String.format("semaphore wake-up: Redisson -> distlock %.1f ms, "
                + "distlock -> Redisson %.1f ms", cj, jc));
    }
}
