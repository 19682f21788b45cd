/*
 * Lakestream: the Hive 2.3 metastore service (pyspark's Hive jars) on ONE address.
 *
 * HiveMetaStore.main binds its Thrift server to every interface (Hive 2.3 has no
 * hive.metastore.thrift.bind.host; Hive 3 added it). Anyone reaching that port can call
 * drop_database(deleteData=true) with the lake's own S3 keys. This launcher serves the same
 * handler (RetryingHMSHandler over HMSHandler, TUGIBasedProcessor, binary protocol, the
 * server's thread and message limits) on the address given, like HiveMetaStore.startMetaStore
 * does for the non-SASL, unframed setup the stack uses.
 *
 * Usage: java -cp <hive-site dir>:<pyspark jars>/*:<classes> LakeMetaStore HOST PORT
 * Compiled by `lake stack up` (spark_jobs.stack.tools.build_java_classes).
 */

import java.net.InetSocketAddress;

import org.apache.hadoop.hive.conf.HiveConf;
import org.apache.hadoop.hive.metastore.HiveMetaStore;
import org.apache.hadoop.hive.metastore.TServerSocketKeepAlive;
import org.apache.hadoop.hive.metastore.TUGIBasedProcessor;
import org.apache.hadoop.hive.metastore.api.ThriftHiveMetastore;
import org.apache.hadoop.hive.thrift.TUGIContainingTransport;
import org.apache.thrift.protocol.TBinaryProtocol;
import org.apache.thrift.server.TServer;
import org.apache.thrift.server.TThreadPoolServer;
import org.apache.thrift.transport.TServerSocket;

public final class LakeMetaStore {
    private LakeMetaStore() {
    }

    public static void main(String[] args) throws Exception {
        if (args.length != 2) {
            System.err.println("usage: LakeMetaStore HOST PORT");
            System.exit(2);
        }
        String host = args[0];
        int port = Integer.parseInt(args[1]);
        HiveConf conf = new HiveConf(HiveMetaStore.HMSHandler.class);
        if (conf.getBoolVar(HiveConf.ConfVars.METASTORE_USE_THRIFT_SASL)
                || conf.getBoolVar(HiveConf.ConfVars.METASTORE_USE_THRIFT_FRAMED_TRANSPORT)
                || !conf.getBoolVar(HiveConf.ConfVars.METASTORE_EXECUTE_SET_UGI)) {
            throw new IllegalStateException("LakeMetaStore serves the plain (no SASL, unframed, setugi) transport "
                    + "only; use HiveMetaStore for other setups");
        }
        long maxMessageSize = conf.getLongVar(HiveConf.ConfVars.METASTORESERVERMAXMESSAGESIZE);
        ThriftHiveMetastore.Iface handler =
                HiveMetaStore.newRetryingHMSHandler("new db based metaserver", conf, false);
        TServerSocket socket = new TServerSocketKeepAlive(new TServerSocket(new InetSocketAddress(host, port)));
        TThreadPoolServer.Args serverArgs = new TThreadPoolServer.Args(socket)
                .processor(new TUGIBasedProcessor<>(handler))
                .transportFactory(new TUGIContainingTransport.Factory())
                .protocolFactory(new TBinaryProtocol.Factory())
                .inputProtocolFactory(new TBinaryProtocol.Factory(true, true, maxMessageSize, maxMessageSize))
                .minWorkerThreads(conf.getIntVar(HiveConf.ConfVars.METASTORESERVERMINTHREADS))
                .maxWorkerThreads(conf.getIntVar(HiveConf.ConfVars.METASTORESERVERMAXTHREADS));
        TServer server = new TThreadPoolServer(serverArgs);
        Runtime.getRuntime().addShutdownHook(new Thread(server::stop, "metastore-shutdown"));
        System.out.println("LakeMetaStore: Hive metastore serving on " + host + ":" + port);
        server.serve();
    }
}
