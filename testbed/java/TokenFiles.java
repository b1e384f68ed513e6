// Hadoop token files as a YARN container finds them (HADOOP_TOKEN_FILE_LOCATION), written by
// Hadoop's own Credentials API for the test bed's secure MiniDFSCluster. Run with Java's
// single-file launcher and the test bed's HDFS jars:
//
//   java -cp '<hdfs jars>/*' testbed/java/TokenFiles.java <namenode uri> <principal> <keytab> \
//       <out dir> <renewer>
//
// Logs in from the keytab, asks the NameNode for HDFS delegation tokens and writes:
//   <out dir>/tokens-v0  version 0 (Writable: what YARN writes for a container),
//   <out dir>/tokens-v1  version 1 (protobuf: what `hadoop dtutil` writes), the same token,
//   <out dir>/cancelled  version 0, another token, cancelled at the NameNode after writing.
// Each file also holds a YARN AM-RM token and a secret key, as a container's does. One JSON line
// per HDFS token on stdout: file, kind, service, Token.encodeToUrlString() and the password
// (hex), for the tests' leak checks.
import java.net.URI;
import java.nio.charset.StandardCharsets;
import org.apache.commons.codec.binary.Hex;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.io.Text;
import org.apache.hadoop.security.Credentials;
import org.apache.hadoop.security.UserGroupInformation;
import org.apache.hadoop.security.token.Token;

public class TokenFiles {
  static Credentials fetch(FileSystem fs, String renewer) throws Exception {
    Credentials creds = new Credentials();
    fs.addDelegationTokens(renewer, creds);
    byte[] ident = "not-an-hdfs-token".getBytes(StandardCharsets.UTF_8);
    creds.addToken(
        new Text("amrm"),
        new Token<>(ident, new byte[] {1, 2, 3}, new Text("YARN_AM_RM_TOKEN"), new Text("127.0.0.1:8030")));
    creds.addSecretKey(new Text("sparklag.testbed.secret"), new byte[] {9, 8, 7, 6});
    return creds;
  }

  static void print(String file, Credentials creds) throws Exception {
    for (Token<?> t : creds.getAllTokens()) {
      if (t.getKind().toString().equals("HDFS_DELEGATION_TOKEN")) {
        System.out.println(
            "{\"file\": \"" + file + "\", \"kind\": \"" + t.getKind() + "\", \"service\": \""
                + t.getService() + "\", \"url\": \"" + t.encodeToUrlString()
                + "\", \"password\": \"" + Hex.encodeHexString(t.getPassword()) + "\"}");
      }
    }
  }

  public static void main(String[] a) throws Exception {
    Configuration conf = new Configuration();
    String realm = a[1].substring(a[1].indexOf('@') + 1);
    conf.set("hadoop.security.authentication", "kerberos");
    conf.set("dfs.namenode.kerberos.principal", "hdfs/localhost@" + realm);
    conf.set("dfs.data.transfer.protection", "authentication");
    UserGroupInformation.setConfiguration(conf);
    UserGroupInformation.loginUserFromKeytab(a[1], a[2]);
    FileSystem fs = FileSystem.get(new URI(a[0]), conf);
    String out = a[3];
    Credentials live = fetch(fs, a[4]);
    live.writeTokenStorageFile(new Path("file://" + out + "/tokens-v0"), conf,
        Credentials.SerializedFormat.WRITABLE);
    live.writeTokenStorageFile(new Path("file://" + out + "/tokens-v1"), conf,
        Credentials.SerializedFormat.PROTOBUF);
    print("tokens-v0", live);
    Credentials cancelled = fetch(fs, a[4]);
    cancelled.writeTokenStorageFile(new Path("file://" + out + "/cancelled"), conf,
        Credentials.SerializedFormat.WRITABLE);
    print("cancelled", cancelled);
    for (Token<?> t : cancelled.getAllTokens()) {
      if (t.getKind().toString().equals("HDFS_DELEGATION_TOKEN")) {
        t.cancel(conf);
      }
    }
  }
}
