/*
 * Lakestream: a gRPC interceptor of the Spark Connect server (spark.connect.grpc.interceptor.classes). Spark
 * Connect has two doors that bypass SQL plans, so LakeAnalystGuard's check rule does not see them:
 *   - AddArtifacts uploads jars, classes and Python files into the session (code run as the service user);
 *   - Config reads and sets session settings directly (spark.conf.get("spark.authenticate.secret"),
 *     spark.conf.set("fs.file.impl", ...)).
 * This refuses every AddArtifacts call and any Config operation naming a key LakeAnalystGuard guards (or
 * listing them all).
 */

import org.apache.spark.connect.proto.ConfigRequest;
import org.sparkproject.connect.grpc.Metadata;
import org.sparkproject.connect.grpc.ServerCall;
import org.sparkproject.connect.grpc.ServerCallHandler;
import org.sparkproject.connect.grpc.ServerInterceptor;
import org.sparkproject.connect.grpc.Status;
import org.sparkproject.connect.grpc.ForwardingServerCallListener.SimpleForwardingServerCallListener;

public final class LakeConnectGuard implements ServerInterceptor {
    @Override
    public <Q, R> ServerCall.Listener<Q> interceptCall(ServerCall<Q, R> call, Metadata headers,
                                                       ServerCallHandler<Q, R> next) {
        String method = call.getMethodDescriptor().getFullMethodName();
        if (method.endsWith("/AddArtifacts")) {
            call.close(Status.PERMISSION_DENIED.withDescription(
                    "Lakestream: uploading artifacts (jars, classes, Python files) is not allowed"), new Metadata());
            return new ServerCall.Listener<Q>() {
            };
        }
        ServerCall.Listener<Q> listener = next.startCall(call, headers);
        if (!method.endsWith("/Config")) {
            return listener;
        }
        return new SimpleForwardingServerCallListener<Q>(listener) {
            private boolean closed;

            @Override
            public void onMessage(Q message) {
                String bad = message instanceof ConfigRequest request ? refusedKey(request.getOperation()) : null;
                if (bad != null) {
                    closed = true;
                    call.close(Status.PERMISSION_DENIED.withDescription(
                            "Lakestream: the setting " + bad + " is not readable or settable here"), new Metadata());
                    return;
                }
                super.onMessage(message);
            }

            @Override
            public void onHalfClose() {
                if (!closed) {
                    super.onHalfClose();
                }
            }
        };
    }

    static String refusedKey(ConfigRequest.Operation op) {
        java.util.List<String> keys = new java.util.ArrayList<>();
        switch (op.getOpTypeCase()) {
            case SET -> op.getSet().getPairsList().forEach(p -> keys.add(p.getKey()));
            case GET -> keys.addAll(op.getGet().getKeysList());
            case GET_WITH_DEFAULT -> op.getGetWithDefault().getPairsList().forEach(p -> keys.add(p.getKey()));
            case GET_OPTION -> keys.addAll(op.getGetOption().getKeysList());
            case UNSET -> keys.addAll(op.getUnset().getKeysList());
            case IS_MODIFIABLE -> keys.addAll(op.getIsModifiable().getKeysList());
            case GET_ALL -> {
                return "(all settings)";
            }
            default -> {
            }
        }
        for (String key : keys) {
            if (LakeAnalystGuard.GUARDED_KEYS.matcher(key.trim()).matches()) {
                return key;
            }
        }
        return null;
    }
}
