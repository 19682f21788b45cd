/*
 * Lakestream: password authentication for the Spark Thrift Server (HiveServer2, JDBC/ODBC clients).
 *
 * HiveServer2 with hive.server2.authentication=CUSTOM calls Authenticate(user, password) for every new
 * session and refuses it when this throws. Users and passwords are "user=password" lines of the file named
 * by the LAKE_THRIFT_USERS_FILE environment variable (a 0600 file in the state dir, written by
 * `lake stack up`), read on every login so a changed password needs no restart. Passwords are compared in
 * constant time; an unknown user and a wrong password fail alike.
 *
 * Compiled by `lake stack up` with the metastore launcher (spark_jobs.stack.tools.build_java_classes).
 */

import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.security.MessageDigest;
import java.util.Properties;

import javax.security.sasl.AuthenticationException;

import org.apache.hive.service.auth.PasswdAuthenticationProvider;

public final class LakeThriftAuth implements PasswdAuthenticationProvider {
    static final String USERS_ENV = "LAKE_THRIFT_USERS_FILE";

    @Override
    public void Authenticate(String user, String password) throws AuthenticationException {
        String file = System.getenv(USERS_ENV);
        if (file == null || file.isEmpty()) {
            throw new AuthenticationException(USERS_ENV + " is not set: the Thrift server cannot check passwords");
        }
        Properties users = new Properties();
        try (InputStream in = Files.newInputStream(Paths.get(file))) {
            users.load(in);
        } catch (IOException e) {
            throw new AuthenticationException("cannot read the Thrift users file " + file + ": " + e.getMessage());
        }
        String expected = user == null ? null : users.getProperty(user);
        byte[] given = (password == null ? "" : password).getBytes(StandardCharsets.UTF_8);
        byte[] wanted = (expected == null ? "\u0000" : expected).getBytes(StandardCharsets.UTF_8);
        if (!MessageDigest.isEqual(given, wanted) || expected == null || expected.isEmpty()) {
            throw new AuthenticationException("wrong user or password for the Lakestream Thrift server");
        }
    }
}
