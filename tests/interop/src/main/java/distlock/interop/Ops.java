package distlock.interop;

import java.lang.reflect.Method;
import java.util.Set;
import java.util.concurrent.TimeUnit;

import org.redisson.api.RBucket;
import org.redisson.api.RLock;
import org.redisson.api.RSemaphore;
import org.redisson.api.RedissonClient;
import org.redisson.client.codec.StringCodec;

/**
 * The commands of the suite's Java agents, run on the calling thread
 * (Redisson's locks belong to a thread).  The same line protocol as the C
 * agent (dl-agent.c): a command line in, one answer line out,
 * "status startNs endNs [value]", with System.nanoTime, which on Linux
 * reads CLOCK_MONOTONIC as the C agent does.
 */
final class Ops {
    private final RedissonClient client;

    Ops(RedissonClient client) {
        this.client = client;
    }

    /** The owner string Redisson writes into a lock hash for this thread. */
    String owner() {
        return client.getId() + ":" + Thread.currentThread().getId();
    }

    String run(String line) {
        String[] a = line.trim().split("\\s+");
        long t0 = System.nanoTime();
        try {
            String v = dispatch(a);
            if (v == null) {
                return "busy " + t0 + " " + System.nanoTime();
            }
            return ("ok " + t0 + " " + System.nanoTime() + " " + v).trim();
        } catch (Throwable e) {
            String why = String.valueOf(e).replace('\n', ' ');
            return "err " + t0 + " " + System.nanoTime() + " 0 " + why;
        }
    }

    /** The commands on a lock: lock, trylock (ms) and unlock, of each kind. */
    private static final Set<String> LOCK_COMMANDS = Set.of(
            "lock", "trylock", "unlock",
            "flock", "ftrylock", "funlock",
            "rlock", "tryrlock", "runlock",
            "wlock", "trywlock", "wunlock");

    /**
     * The lock a command names by its first letter, after any "try": "f" the
     * fair lock, "r" and "w" the read and the write side of the read-write
     * lock, else the plain lock ("ftrylock" is the fair lock's try).
     */
    private RLock lockOf(String cmd, String name) {
        switch (cmd.startsWith("try") ? cmd.charAt(3) : cmd.charAt(0)) {
        case 'f':
            return client.getFairLock(name);
        case 'r':
            return client.getReadWriteLock(name).readLock();
        case 'w':
            return client.getReadWriteLock(name).writeLock();
        default:
            return client.getLock(name);
        }
    }

    /** Takes lock, tries it for ms, or gives it back, as cmd says. */
    private static String onLock(String cmd, RLock lock, long ms) throws InterruptedException {
        if (cmd.contains("unlock")) {
            lock.unlock();
            return "";
        }
        if (cmd.contains("try")) {
            return lock.tryLock(ms, TimeUnit.MILLISECONDS) ? "" : null;
        }
        lock.lock();
        return "";
    }

    /** "" done, null a try that did not get the lock, else a value. */
    private String dispatch(String[] a) throws Exception {
        String cmd = a[0];
        String name = a.length > 1 ? a[1] : "";
        long ms = a.length > 2 && !cmd.equals("count") ? Long.parseLong(a[2]) : 0;
        if (LOCK_COMMANDS.contains(cmd)) {
            return onLock(cmd, lockOf(cmd, name), ms);
        }
        switch (cmd) {
        case "pid":
            return Long.toString(ProcessHandle.current().pid());
        case "owner":
            return owner();
        case "sleep":
            Thread.sleep(Long.parseLong(name));
            return "";
        case "held":
            return Integer.toString(client.getLock(name).getHoldCount());
        case "xlock":
            return fenced(name, "lockAndGetToken").toString();
        case "xunlock":
            fenced(name, "unlock");
            return "";
        case "count":
            count(name, a[2], Integer.parseInt(a[3]));
            return "";
        case "ssetpermits":
            return client.getSemaphore(name).trySetPermits((int) ms) ? "" : null;
        case "sacquire":
            return semAcquire(client.getSemaphore(name), ms) ? "" : null;
        case "srelease":
            client.getSemaphore(name).release();
            return "";
        case "svalue":
            return Integer.toString(client.getSemaphore(name).availablePermits());
        default:
            throw new IllegalArgumentException("unknown command " + cmd);
        }
    }

    /** One permit: at once (ms 0), or waiting up to ms. */
    private static boolean semAcquire(RSemaphore sem, long ms) throws InterruptedException {
        return ms <= 0 ? sem.tryAcquire() : sem.tryAcquire(ms, TimeUnit.MILLISECONDS);
    }

    /** RFencedLock by reflection: the older pinned line has none. */
    private Object fenced(String name, String method) throws Exception {
        Object lock = client.getClass().getMethod("getFencedLock", String.class)
                .invoke(client, name);
        Method m = lock.getClass().getMethod(method);
        Object r = m.invoke(lock);
        return r == null ? "" : r;
    }

    /** n increments of key, GET then SET, each under the lock name. */
    private void count(String name, String key, int n) {
        RLock lock = client.getLock(name);
        RBucket<String> b = client.getBucket(key, StringCodec.INSTANCE);
        for (int i = 0; i < n; i++) {
            lock.lock();
            try {
                String v = b.get();
                b.set(Long.toString(v == null ? 1 : Long.parseLong(v) + 1));
            } finally {
                lock.unlock();
            }
        }
    }
}
