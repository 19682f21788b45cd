/*
 * Lakestream: creates the shared catalog's schema in PostgreSQL once, before any Spark process starts.
 *
 * There is no metastore service: every Spark process runs Hive's metastore code (ObjectStore) in its own JVM
 * against the metastore database (spark_jobs.session.catalog_conf). DataNucleus creates a model's table the first
 * time a JVM uses it; two JVMs doing that at once (the stream and a gold task on a fresh install) race on the
 * CREATE TABLE. So `lake stack up` runs this first: it creates the tables of every persistent model class of
 * pyspark's hive-metastore jar, then the default database and roles (Hive's own HMSHandler start-up).
 *
 * Usage: java -cp <hive-site dir>:<pyspark jars>/*:<lake jars>:<classes> LakeMetastoreInit
 * Compiled by `lake stack up` (spark_jobs.stack.tools.build_java_classes).
 */

import java.io.File;
import java.util.ArrayList;
import java.util.Enumeration;
import java.util.List;
import java.util.jar.JarEntry;
import java.util.jar.JarFile;

import javax.jdo.PersistenceManager;

import org.apache.hadoop.hive.conf.HiveConf;
import org.apache.hadoop.hive.metastore.HiveMetaStore;
import org.apache.hadoop.hive.metastore.ObjectStore;
import org.apache.hadoop.hive.metastore.api.ThriftHiveMetastore;
import org.apache.hadoop.hive.metastore.model.MTable;
import org.datanucleus.ClassLoaderResolver;
import org.datanucleus.PersistenceNucleusContext;
import org.datanucleus.api.jdo.JDOPersistenceManagerFactory;
import org.datanucleus.metadata.AbstractClassMetaData;

public final class LakeMetastoreInit {
    private static final String MODEL = "org/apache/hadoop/hive/metastore/model/";

    private LakeMetastoreInit() {
    }

    public static void main(String[] args) throws Exception {
        HiveConf conf = new HiveConf(HiveMetaStore.HMSHandler.class);
        if (!conf.getVar(HiveConf.ConfVars.METASTOREURIS).isEmpty()) {
            throw new IllegalStateException("hive.metastore.uris is set: the schema belongs to that service");
        }
        ObjectStore store = new ObjectStore();
        store.setConf(conf);
        PersistenceManager pm = store.getPersistenceManager();
        PersistenceNucleusContext context =
                (PersistenceNucleusContext) ((JDOPersistenceManagerFactory) pm.getPersistenceManagerFactory())
                        .getNucleusContext();
        ClassLoaderResolver clr = context.getClassLoaderResolver(LakeMetastoreInit.class.getClassLoader());
        List<String> persistent = new ArrayList<>();
        for (String name : modelClasses()) {
            AbstractClassMetaData meta = context.getMetaDataManager().getMetaDataForClass(name, clr);
            if (meta != null && !meta.isEmbeddedOnly()) {
                persistent.add(name);
            }
        }
        context.getStoreManager().manageClasses(clr, persistent.toArray(new String[0]));
        store.shutdown();
        // The default database, roles and admin users, as every HMSHandler creates them on start.
        ThriftHiveMetastore.Iface handler = HiveMetaStore.newRetryingHMSHandler("lake metastore init", conf, true);
        System.out.println("LakeMetastoreInit: " + persistent.size() + " model tables present; databases: "
                + handler.get_all_databases());
        handler.shutdown();
    }

    private static List<String> modelClasses() throws Exception {
        File jar = new File(MTable.class.getProtectionDomain().getCodeSource().getLocation().toURI());
        List<String> names = new ArrayList<>();
        try (JarFile file = new JarFile(jar)) {
            for (Enumeration<JarEntry> e = file.entries(); e.hasMoreElements();) {
                String entry = e.nextElement().getName();
                if (entry.startsWith(MODEL) && entry.endsWith(".class") && !entry.contains("$")
                        && entry.indexOf('/', MODEL.length()) < 0) {
                    names.add(entry.substring(0, entry.length() - ".class".length()).replace('/', '.'));
                }
            }
        }
        if (names.isEmpty()) {
            throw new IllegalStateException("no metastore model classes in " + jar);
        }
        return names;
    }
}
