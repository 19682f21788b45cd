/*
 * Lakestream: the local file system (fs.file.impl) of the Thrift and Spark Connect servers, which run analysts'
 * SQL as the service user. Every path is resolved (symlinks, "..") and refused unless it lies under one of the
 * roots in lake.guard.fs.allowedRoots (comma-separated: the servers' own scratch folders) and under none of
 * lake.guard.fs.deniedRoots (the state dir, the artifact cache, the repository). A second wall behind
 * LakeAnalystGuard's plan check: whatever path a query finds its way to, the file system refuses it.
 *
 * All of RawLocalFileSystem's operations go through pathToFile, so that one override guards open, create,
 * listStatus, getFileStatus, mkdirs, delete, rename and setPermission. FileSystem.getLocal() casts to
 * LocalFileSystem, hence the subclass of it around the guarded raw file system.
 */

import java.io.File;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.List;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;

public final class LakeLocalFileSystem extends LocalFileSystem {
    static final String ALLOWED = "lake.guard.fs.allowedRoots";
    static final String DENIED = "lake.guard.fs.deniedRoots";

    public LakeLocalFileSystem() {
        super(new Guarded());
    }

    static final class Guarded extends RawLocalFileSystem {
        private List<String> allowed = List.of();
        private List<String> denied = List.of();

        @Override
        public void initialize(java.net.URI uri, Configuration conf) throws IOException {
            super.initialize(uri, conf);
            allowed = roots(conf.get(ALLOWED, ""));
            denied = roots(conf.get(DENIED, ""));
        }

        @Override
        public File pathToFile(Path path) {
            File file = super.pathToFile(path);
            String real;
            try {
                real = file.getCanonicalPath();
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
            if (!under(real, allowed) || under(real, denied)) {
                throw new SecurityException("Lakestream: local path " + path + " is not readable or writable from "
                        + "this server (docs/security.md, Security model)");
            }
            return file;
        }

        private static boolean under(String path, List<String> roots) {
            for (String root : roots) {
                if (path.equals(root) || path.startsWith(root.endsWith("/") ? root : root + "/")) {
                    return true;
                }
            }
            return false;
        }

        private static List<String> roots(String csv) throws IOException {
            List<String> out = new ArrayList<>();
            for (String part : csv.split(",")) {
                if (!part.isBlank()) {
                    out.add(new File(part.trim()).getCanonicalPath());
                }
            }
            return out;
        }
    }
}
