/*
 * Lakestream: what an analyst login (Thrift JDBC, Spark Connect) may not do on the servers that run as the
 * service user. A Spark SQL extension (spark.sql.extensions of the Thrift and Spark Connect servers only): its
 * check rule runs on every analysed plan, the analyst's and the internal plans of Delta alike, and refuses
 *   - loading code: ADD JAR/FILE/ARCHIVE, CREATE FUNCTION (a catalog function USING JAR would also run in the
 *     stream), Python code (UDFs, UDTFs, mapInPandas/mapInArrow, Python data sources: it runs as the service
 *     user), reflect/java_method;
 *   - local files: LOAD DATA, INSERT OVERWRITE DIRECTORY, and any file relation outside the lake's prefix
 *     (spark.lake.guard.allowedPathPrefix, the s3a:// bucket), e.g. text.`file:///<state>/...`;
 *   - reading or changing secrets and file-system settings through SET (SET fs.file.impl=... would swap the
 *     guarded local file system, SET spark.hadoop.fs.s3a.secret.key would print the key).
 * The local file system itself refuses paths outside its allowed roots (LakeLocalFileSystem), a second wall.
 *
 * Compiled by `lake stack up` (spark_jobs.stack.tools.build_java_classes).
 */

import java.util.Locale;
import java.util.Set;
import java.util.regex.Pattern;

import org.apache.spark.sql.SparkSessionExtensions;
import org.apache.spark.sql.catalyst.catalog.CatalogTable;
import org.apache.spark.sql.catalyst.catalog.HiveTableRelation;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.execution.command.SetCommand;
import org.apache.spark.sql.execution.datasources.HadoopFsRelation;
import org.apache.spark.sql.execution.datasources.LogicalRelation;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation;
import org.apache.spark.sql.execution.datasources.v2.FileTable;

import scala.Function1;
import scala.Option;
import scala.Tuple2;
import scala.runtime.AbstractFunction1;
import scala.runtime.BoxedUnit;

public final class LakeAnalystGuard extends AbstractFunction1<SparkSessionExtensions, BoxedUnit> {
    static final String PREFIX_CONF = "spark.lake.guard.allowedPathPrefix";

    /** Plan nodes that load code or touch local paths, by class name (some are internal, some differ by version). */
    static final Set<String> DENIED_NODES = Set.of(
            "AddJarsCommand", "AddFilesCommand", "AddArchivesCommand", "CreateFunctionCommand", "CreateFunction",
            "CreateUserDefinedFunction", "LoadDataCommand", "LoadData", "InsertIntoDir",
            "InsertIntoDataSourceDirCommand", "InsertIntoHiveDirCommand", "RefreshResource");
    static final Set<String> DENIED_EXPRESSIONS = Set.of("CallMethodViaReflection", "TryReflect");
    /** Python code runs as the service user. */
    static final Pattern PYTHON = Pattern.compile(".*(Python|InPandas|InArrow).*");
    /** SET keys an analyst may neither read nor change. */
    static final Pattern GUARDED_KEYS = Pattern.compile(
            "(?i)(spark\\.hadoop\\.|spark\\.hive\\.|)(fs\\.|hadoop\\.|hive\\.|javax\\.jdo\\.|datanucleus\\.).*"
                    + "|.*(secret|password|token|access\\.?key|credential|jaas).*"
                    + "|spark\\.(jars|files|archives|sql\\.extensions|driver|executor|authenticate|lake\\.).*"
                    + "|spark\\.sql\\.(sources|legacy|hive\\.metastore|runSQLOnFiles|warehouse).*");

    @Override
    public BoxedUnit apply(SparkSessionExtensions extensions) {
        extensions.injectCheckRule(new AbstractFunction1<org.apache.spark.sql.SparkSession, Function1<LogicalPlan, BoxedUnit>>() {
            @Override
            public Function1<LogicalPlan, BoxedUnit> apply(org.apache.spark.sql.SparkSession session) {
                // The prefix comes from the application's conf (spark-defaults), read once: a view is analysed under
                // the conf captured when it was created (spark.sql.* keys only), where SQLConf.get() has no prefix.
                return new Check(session.sparkContext().getConf().get(PREFIX_CONF, ""));
            }
        });
        return BoxedUnit.UNIT;
    }

    static SecurityException refused(String what) {
        return new SecurityException("Lakestream: " + what + " is not allowed for an analyst login (docs/security.md, "
                + "Security model)");
    }

    static final class Check extends AbstractFunction1<LogicalPlan, BoxedUnit> {
        private final String prefix;

        Check(String prefix) {
            this.prefix = prefix;
        }

        @Override
        public BoxedUnit apply(LogicalPlan plan) {
            plan.foreachWithSubqueries(new AbstractFunction1<LogicalPlan, BoxedUnit>() {
                @Override
                public BoxedUnit apply(LogicalPlan node) {
                    checkNode(node, prefix);
                    return BoxedUnit.UNIT;
                }
            });
            return BoxedUnit.UNIT;
        }
    }

    static void checkNode(LogicalPlan node, String prefix) {
        String name = node.getClass().getSimpleName();
        if (DENIED_NODES.contains(name)) {
            throw refused(name);
        }
        if (PYTHON.matcher(name).matches()) {
            throw refused("Python code (" + name + ")");
        }
        if (node instanceof SetCommand set) {
            Option<Tuple2<String, Option<String>>> kv = set.kv();
            if (kv.isDefined() && GUARDED_KEYS.matcher(kv.get()._1().trim()).matches()) {
                throw refused("SET " + kv.get()._1().trim());
            }
            if (kv.isEmpty()) {
                throw refused("SET without a key (it lists every setting)");
            }
        }
        if (node instanceof LogicalRelation rel && rel.relation() instanceof HadoopFsRelation fs) {
            fs.location().rootPaths().foreach(new AbstractFunction1<org.apache.hadoop.fs.Path, BoxedUnit>() {
                @Override
                public BoxedUnit apply(org.apache.hadoop.fs.Path path) {
                    checkPath(path.toUri().toString(), prefix);
                    return BoxedUnit.UNIT;
                }
            });
        }
        if (node instanceof DataSourceV2Relation v2 && v2.table() instanceof FileTable table) {
            table.fileIndex().rootPaths().foreach(new AbstractFunction1<org.apache.hadoop.fs.Path, BoxedUnit>() {
                @Override
                public BoxedUnit apply(org.apache.hadoop.fs.Path path) {
                    checkPath(path.toUri().toString(), prefix);
                    return BoxedUnit.UNIT;
                }
            });
        }
        if (node instanceof HiveTableRelation hive) {
            checkTable(hive.tableMeta(), prefix);
        }
        node.expressions().foreach(new AbstractFunction1<Expression, BoxedUnit>() {
            @Override
            public BoxedUnit apply(Expression root) {
                root.foreach(new AbstractFunction1<Expression, BoxedUnit>() {
                    @Override
                    public BoxedUnit apply(Expression e) {
                        String n = e.getClass().getSimpleName();
                        if (DENIED_EXPRESSIONS.contains(n)) {
                            throw refused("reflect/java_method");
                        }
                        if (PYTHON.matcher(n).matches()) {
                            throw refused("Python code (" + n + ")");
                        }
                        return BoxedUnit.UNIT;
                    }
                });
                return BoxedUnit.UNIT;
            }
        });
    }

    static void checkTable(CatalogTable table, String prefix) {
        if (table.storage().locationUri().isDefined()) {
            checkPath(table.storage().locationUri().get().toString(), prefix);
        }
    }

    static void checkPath(String uri, String prefix) {
        String normalized = uri.toLowerCase(Locale.ROOT);
        if (prefix.isEmpty() || !normalized.startsWith(prefix.toLowerCase(Locale.ROOT)) || uri.contains("/../")) {
            throw refused("a path outside the lake (" + uri + ")");
        }
    }
}
