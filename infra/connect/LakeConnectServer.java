/*
 * Lakestream: the Spark Connect server's main class, in place of Spark's own SparkConnectServer.
 *
 * Spark's main forces spark.sql.artifact.isolation.enabled and .alwaysApplyClassloader to true, over any --conf.
 * With isolation on, every task of a Connect session runs under an executor class loader that asks the
 * driver's RPC file server for each class it cannot find. Janino asks for classes that do not exist on every
 * code generation (org.apache.spark.sql.catalyst.expressions.Object, ...), so each query made RPC round trips.
 * Twice in our CI runs one of them got no answer for 120 s, and the query failed with RemoteClassLoaderError
 * (docs/benchmarks.md, "Spark Connect class lookups").
 *
 * Isolation exists for session artifacts (jars, classes, files a client uploads). LakeConnectGuard refuses every
 * AddArtifacts call, so no session has any: turning isolation off loses nothing and removes the remote lookups.
 * Everything else is Spark's main: start the service on the session's context, wait, stop both.
 */

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.connect.service.SparkConnectService$;

public final class LakeConnectServer {
    private LakeConnectServer() {
    }

    public static void main(String[] args) throws InterruptedException {
        SparkSession session = SparkSession.builder()
                .config("spark.sql.artifact.isolation.enabled", false)
                .config("spark.sql.artifact.isolation.alwaysApplyClassloader", false)
                .getOrCreate();
        SparkConnectService$ service = SparkConnectService$.MODULE$;
        try {
            try {
                service.start(session.sparkContext());
            } catch (RuntimeException e) {
                System.err.println("Lakestream: error starting the Spark Connect server: " + e);
                e.printStackTrace();
                System.exit(-1);
            }
            System.err.println("Lakestream: Spark Connect server started at " + service.bindingAddress()
                    + " (session artifact isolation off)");
            service.server().awaitTermination();
        } finally {
            if (service.started()) {
                service.stop(service.stop$default$1(), service.stop$default$2());
            }
            session.stop();
        }
    }
}
