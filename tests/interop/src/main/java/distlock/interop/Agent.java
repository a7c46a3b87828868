package distlock.interop;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;

import org.redisson.Redisson;
import org.redisson.api.RedissonClient;
import org.redisson.config.ClusterServersConfig;
import org.redisson.config.Config;

/**
 * A Java process of the suite: one Redisson client, commands on stdin run
 * one after another on the main thread (see Ops), answers on stdout.
 * Prints "ready PID" once the client is connected.
 */
public final class Agent {
    private Agent() {
    }

    /**
     * A client for the suite's server: INTEROP_CLUSTER (host:port,...) for
     * a cluster, else INTEROP_REDIS (host:port).  INTEROP_WATCHDOG_MS
     * shortens the watchdog lease (the SIGKILL scenarios).
     */
    static RedissonClient connect() {
        Config c = new Config();
        String cluster = System.getenv("INTEROP_CLUSTER");
        if (cluster != null && !cluster.isEmpty()) {
            ClusterServersConfig cc = c.useClusterServers();
            for (String hp : cluster.split(",")) {
                cc.addNodeAddress("redis://" + hp);
            }
            cc.setScanInterval(1000);
        } else {
            c.useSingleServer().setAddress("redis://" + System.getenv("INTEROP_REDIS"))
                    .setConnectionMinimumIdleSize(2).setConnectionPoolSize(8);
        }
        String wd = System.getenv("INTEROP_WATCHDOG_MS");
        if (wd != null && !wd.isEmpty()) {
            c.setLockWatchdogTimeout(Long.parseLong(wd));
        }
        return Redisson.create(c);
    }

    public static void main(String[] args) throws Exception {
        PrintStream out = new PrintStream(System.out, true, "UTF-8");
        RedissonClient client = connect();
        Ops ops = new Ops(client);
        out.println("ready " + ProcessHandle.current().pid());
        BufferedReader in = new BufferedReader(
                new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.trim().isEmpty()) {
                continue;
            }
            if (line.trim().equals("quit")) {
                break;
            }
            out.println(ops.run(line));
        }
        client.shutdown();
    }
}
