package distlock.interop;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

import org.redisson.api.RedissonClient;

/**
 * One client of a scenario: a C agent process, a Java agent process, or a
 * thread of the suite's own Redisson client.  Commands are answered in
 * order; send() returns at once, so a scenario can leave a lock call
 * blocked and look at it later.
 */
abstract class Handle implements AutoCloseable {
    /** An answer: status ok, busy or err, the call's start and end (ns). */
    static final class Reply {
        final String status;
        final long t0;
        final long t1;
        final String value;
        final String line;

        Reply(String line) {
            this.line = line;
            String[] a = line.split(" ", 4);
            status = a[0];
            t0 = a.length > 1 ? Long.parseLong(a[1]) : 0;
            t1 = a.length > 2 ? Long.parseLong(a[2]) : 0;
            value = a.length > 3 ? a[3] : "";
        }

        boolean ok() {
            return status.equals("ok");
        }
    }

    final String label;

    Handle(String label) {
        this.label = label;
    }

    abstract CompletableFuture<Reply> send(String cmd);

    /** Sends and waits for the answer (at most 90 s: nothing here waits so long). */
    Reply call(String cmd) {
        try {
            return send(cmd).get(90, TimeUnit.SECONDS);
        } catch (Exception e) {
            throw new AssertionError(label + ": no answer to '" + cmd + "': " + e);
        }
    }

    /** Sends and requires an ok. */
    Reply ok(String cmd) {
        Reply r = call(cmd);
        if (!r.ok()) {
            throw new AssertionError(label + ": '" + cmd + "' answered " + r.line);
        }
        return r;
    }

    /** SIGKILL, for the processes. */
    void kill() {
        throw new UnsupportedOperationException(label + " is not a process");
    }

    @Override
    public abstract void close();

    /**
     * After close: why the process ended badly (a non-zero status after
     * quit: a sanitizer's report in a sanitizer build), or null.
     */
    String badExit() {
        return null;
    }

    /** A child process speaking the agent protocol. */
    static final class Proc extends Handle {
        private final Process p;
        private final Writer w;
        private final ConcurrentLinkedQueue<CompletableFuture<Reply>> pending =
                new ConcurrentLinkedQueue<>();
        final long pid;
        private boolean killed;
        private String bad;

        Proc(String label, List<String> argv, java.util.Map<String, String> env)
                throws IOException {
            super(label);
            ProcessBuilder pb = new ProcessBuilder(new ArrayList<>(argv));
            pb.environment().putAll(env);
            pb.redirectError(ProcessBuilder.Redirect.INHERIT);
            p = pb.start();
            pid = p.pid();
            w = new OutputStreamWriter(p.getOutputStream(), StandardCharsets.UTF_8);
            BufferedReader r = new BufferedReader(
                    new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8));
            String first = r.readLine();
            if (first == null || !first.startsWith("ready")) {
                p.destroyForcibly();
                throw new IOException(label + " did not start: " + first);
            }
            Thread t = new Thread(() -> readLoop(r), label + "-reader");
            t.setDaemon(true);
            t.start();
        }

        private void readLoop(BufferedReader r) {
            try {
                String line;
                while ((line = r.readLine()) != null) {
                    CompletableFuture<Reply> f = pending.poll();
                    if (f != null) {
                        f.complete(new Reply(line));
                    }
                }
            } catch (IOException e) {
                // the process is gone: fail what waits below
            }
            CompletableFuture<Reply> f;
            while ((f = pending.poll()) != null) {
                f.completeExceptionally(new IOException(label + " exited"));
            }
        }

        @Override
        synchronized CompletableFuture<Reply> send(String cmd) {
            CompletableFuture<Reply> f = new CompletableFuture<>();
            pending.add(f);
            try {
                w.write(cmd + "\n");
                w.flush();
            } catch (IOException e) {
                pending.remove(f);
                f.completeExceptionally(e);
            }
            return f;
        }

        @Override
        void kill() {
            killed = true;
            p.destroyForcibly();
            try {
                p.waitFor(10, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }

        @Override
        public void close() {
            if (killed) {
                return;
            }
            if (!p.isAlive()) {
                bad = label + " exited by itself, status " + p.exitValue();
                return;
            }
            try {
                w.write("quit\n");
                w.flush();
                w.close();
                if (p.waitFor(15, TimeUnit.SECONDS)) {
                    if (p.exitValue() != 0) {
                        bad = label + " exited with status " + p.exitValue()
                                + " after quit (see its stderr above)";
                    }
                    return;
                }
            } catch (IOException | InterruptedException e) {
                // fall through to the kill
            }
            bad = label + " did not quit";
            kill();
        }

        @Override
        String badExit() {
            return bad;
        }
    }

    /** A thread of the suite's own Redisson client (its own owner name). */
    static final class Local extends Handle {
        private final ExecutorService ex;
        private final Ops ops;

        Local(String label, RedissonClient client) {
            super(label);
            ex = Executors.newSingleThreadExecutor(r -> {
                Thread t = new Thread(r, label);
                t.setDaemon(true);
                return t;
            });
            ops = new Ops(client);
        }

        @Override
        CompletableFuture<Reply> send(String cmd) {
            return CompletableFuture.supplyAsync(() -> new Reply(ops.run(cmd)), ex);
        }

        @Override
        public void close() {
            ex.shutdownNow();
        }
    }
}
