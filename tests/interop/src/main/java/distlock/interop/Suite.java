package distlock.interop;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import org.redisson.api.RedissonClient;
import org.redisson.client.codec.StringCodec;

/**
 * The scenarios of the interop suite (docs/design.md, "Redisson"): each
 * mixes the C agent (distlock) and Redisson clients on the suite's server
 * and asserts what both see.  Arguments: the scenario numbers to run.
 * Environment: INTEROP_REDIS or INTEROP_CLUSTER (see Agent), DISTLOCK_URL
 * for the C side, INTEROP_C_AGENT and INTEROP_TOOL (dl-agent and the
 * distlock tool), INTEROP_LABEL (the Redisson line, for the output).
 * Exits 1 when a scenario failed.
 */
public final class Suite {
    /** A wake-up slower than this was not driven by the release message. */
    static final long WAKE_BOUND_MS = 5000;

    final RedissonClient admin;
    final String label;
    final boolean cluster;
    final List<Handle> open = new ArrayList<>();
    final List<String> figures = new ArrayList<>();
    String scenario = "";

    private Suite() {
        admin = Agent.connect();
        label = envOr("INTEROP_LABEL", "redisson");
        String c = System.getenv("INTEROP_CLUSTER");
        cluster = c != null && !c.isEmpty();
    }

    static String envOr(String k, String dflt) {
        String v = System.getenv(k);
        return v == null || v.isEmpty() ? dflt : v;
    }

    // ---- clients ----------------------------------------------------------

    /** A C agent; env adds to the suite's environment (DISTLOCK_*). */
    Handle cAgent(String name, String... env) throws IOException {
        Map<String, String> e = new HashMap<>();
        for (int i = 0; i + 1 < env.length; i += 2) {
            e.put(env[i], env[i + 1]);
        }
        return track(new Handle.Proc(name,
                Collections.singletonList(System.getenv("INTEROP_C_AGENT")), e));
    }

    /** A Java agent in its own JVM (for SIGKILL and separate processes). */
    Handle javaAgent(String name, String... env) throws IOException {
        Map<String, String> e = new HashMap<>();
        for (int i = 0; i + 1 < env.length; i += 2) {
            e.put(env[i], env[i + 1]);
        }
        String java = System.getProperty("java.home") + "/bin/java";
        List<String> argv = Arrays.asList(java, "-Xss512k", "-XX:TieredStopAtLevel=1",
                "-Dorg.slf4j.simpleLogger.defaultLogLevel=error",
                "-cp", System.getProperty("java.class.path"), Agent.class.getName());
        return track(new Handle.Proc(name, argv, e));
    }

    /** A thread of the suite's own Redisson client. */
    Handle javaThread(String name) {
        return track(new Handle.Local(name, admin));
    }

    private Handle track(Handle h) {
        open.add(h);
        return h;
    }

    /** Closes every client; what ended badly (see Handle.badExit). */
    List<String> closeAll() {
        List<String> bad = new ArrayList<>();
        for (Handle h : open) {
            h.close();
            if (h.badExit() != null) {
                bad.add(h.badExit());
            }
        }
        open.clear();
        return bad;
    }

    // ---- looking at Redis -------------------------------------------------

    Map<String, String> hash(String key) {
        return admin.<String, String>getMap(key, StringCodec.INSTANCE).readAllMap();
    }

    /** A plain string key's value, or null. */
    String get(String key) {
        return admin.<String>getBucket(key, StringCodec.INSTANCE).get();
    }

    boolean exists(String key) {
        return admin.getKeys().countExists(key) == 1;
    }

    List<String> queue(String name) {
        return admin.<String>getList("redisson_lock_queue:{" + name + "}",
                StringCodec.INSTANCE).readAll();
    }

    Double timeoutScore(String name, String owner) {
        return admin.<String>getScoredSortedSet("redisson_lock_timeout:{" + name + "}",
                StringCodec.INSTANCE).getScore(owner);
    }

    /**
     * PUBSUB NUMSUB (plain) or SHARDNUMSUB of chan, summed over the
     * cluster's nodes (redis-cli: Redisson has no call for these).
     */
    long subscribers(String verb, String chan) throws IOException, InterruptedException {
        long sum = 0;
        for (String hp : System.getenv("INTEROP_CLUSTER").split(",")) {
            String[] a = hp.split(":");
            ProcessBuilder pb = new ProcessBuilder("redis-cli", "-h", a[0], "-p", a[1],
                    "PUBSUB", verb, chan);
            pb.redirectErrorStream(true);
            Process p = pb.start();
            ByteArrayOutputStream out = new ByteArrayOutputStream();
            try (InputStream in = p.getInputStream()) {
                in.transferTo(out);
            }
            check(p.waitFor(30, TimeUnit.SECONDS) && p.exitValue() == 0,
                    "redis-cli PUBSUB " + verb + " failed: " + out);
            String[] lines = out.toString(StandardCharsets.UTF_8).trim().split("\n");
            check(lines.length == 2, "redis-cli PUBSUB " + verb + ": " + out);
            sum += Long.parseLong(lines[1].trim());
        }
        return sum;
    }

    /** `distlock status NAME` (text), for what an operator sees. */
    String status(String name) throws IOException, InterruptedException {
        ProcessBuilder pb = new ProcessBuilder(System.getenv("INTEROP_TOOL"), "status", name);
        pb.redirectErrorStream(true);
        Process p = pb.start();
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        try (InputStream in = p.getInputStream()) {
            in.transferTo(out);
        }
        p.waitFor(30, TimeUnit.SECONDS);
        return out.toString(StandardCharsets.UTF_8);
    }

    // ---- assertions and waiting --------------------------------------------

    static void check(boolean cond, String what) {
        if (!cond) {
            throw new AssertionError(what);
        }
    }

    static void sleep(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    /** Asserts that f (a blocked call) is still blocked after ms. */
    static void stillBlocked(CompletableFuture<Handle.Reply> f, long ms, String what) {
        sleep(ms);
        check(!f.isDone(), what + " returned while it should wait: "
                + (f.isDone() ? f.join().line : ""));
    }

    static Handle.Reply await(CompletableFuture<Handle.Reply> f, long ms, String what) {
        try {
            return f.get(ms, TimeUnit.MILLISECONDS);
        } catch (Exception e) {
            throw new AssertionError(what + ": no answer within " + ms + " ms (" + e + ")");
        }
    }

    /** Waits (bounded) until the fair queue of name has n entries. */
    void queueReaches(String name, int n) {
        long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
        while (System.nanoTime() < end) {
            if (queue(name).size() == n) {
                return;
            }
            sleep(10);
        }
        throw new AssertionError("the queue of " + name + " never had " + n
                + " entries: " + queue(name));
    }

    static double ms(long ns) {
        return ns / 1e6;
    }

    /** "p50 x ms, max y ms (n)" of a list of milliseconds. */
    static String spread(List<Double> v) {
        List<Double> s = new ArrayList<>(v);
        Collections.sort(s);
        return String.format("p50 %.1f ms, max %.1f ms (%d)", s.get(s.size() / 2),
                s.get(s.size() - 1), s.size());
    }

    void figure(String text) {
        String f = label + (cluster ? " cluster" : "") + " " + scenario + ": " + text;
        figures.add(f);
        System.out.println("    figure: " + f);
    }

    String fresh(String what) {
        return "interop:" + what + ":" + Long.toHexString(System.nanoTime());
    }

    // ---- running ----------------------------------------------------------

    interface Body {
        void run(Suite s) throws Exception;
    }

    static final Map<String, Body> SCENARIOS = new java.util.LinkedHashMap<>();

    static {
        SCENARIOS.put("1", Scenarios::mutualExclusion);
        SCENARIOS.put("2", Scenarios::wakeUps);
        SCENARIOS.put("3", Scenarios::watchdog);
        SCENARIOS.put("4", FairScenarios::fair);
        // its parts, to run one alone
        SCENARIOS.put("4q", s -> {
            FairScenarios.mixedQueue(s, true);
            FairScenarios.mixedQueue(s, false);
        });
        SCENARIOS.put("4dj", FairScenarios::deadRedissonWaiter);
        SCENARIOS.put("4dc", FairScenarios::deadDistlockWaiter);
        SCENARIOS.put("4drop", FairScenarios::droppedWaiter);
        SCENARIOS.put("4stop", FairScenarios::stoppedWaiter);
        SCENARIOS.put("5", Scenarios::readWrite);
        SCENARIOS.put("6", Scenarios::fencing);
        SCENARIOS.put("7", Scenarios::counter);
        SCENARIOS.put("9", Scenarios::semaphore);
    }

    public static void main(String[] args) {
        Suite s = new Suite();
        List<String> which = args.length > 0 ? Arrays.asList(args)
                : new ArrayList<>(SCENARIOS.keySet());
        int failed = 0;
        for (String n : which) {
            Body b = SCENARIOS.get(n);
            if (b == null) {
                System.out.println("unknown scenario " + n);
                failed++;
                continue;
            }
            s.scenario = "scenario " + n;
            long t0 = System.nanoTime();
            System.out.println("[" + s.label + (s.cluster ? ", cluster" : "") + "] "
                    + s.scenario + " ...");
            Throwable err = null;
            try {
                b.run(s);
            } catch (Throwable e) {
                err = e;
            }
            List<String> bad = s.closeAll();
            if (err != null) {
                failed++;
                System.out.println("FAIL " + s.scenario + ": " + err);
                err.printStackTrace(System.out);
            } else if (!bad.isEmpty()) {
                failed++;
                System.out.println("FAIL " + s.scenario + ": " + String.join("; ", bad));
            } else {
                System.out.printf("PASS %s (%.1f s)%n", s.scenario,
                        (System.nanoTime() - t0) / 1e9);
            }
        }
        s.admin.shutdown();
        System.out.println(failed == 0 ? "all passed" : failed + " scenario(s) failed");
        System.exit(failed == 0 ? 0 : 1);
    }
}
