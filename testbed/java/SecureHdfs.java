// A Kerberized HDFS for the test bed, in one JVM: Hadoop's MiniKdc (Apache Kerby) and a secure
// MiniDFSCluster (Kerberos on RPC and on WebHDFS through SPNEGO, HTTPS only, block access tokens,
// data transfer protection). Run with Java's single-file launcher (no build step):
//
//   java -cp '<hdfs jars>/*:<kdc jars>/*:<conf dir>' testbed/java/SecureHdfs.java <work dir>
//
// <conf dir> holds ssl-server.xml / ssl-client.xml (written by testbed/secure_hdfs.py with a
// keystore from keytool). The program writes <work dir>/details.json once the cluster is active
// and runs until it is stopped (testbed/process.py stops it by its pid).
import java.io.File;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.Properties;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.permission.FsPermission;
import org.apache.hadoop.hdfs.HdfsConfiguration;
import org.apache.hadoop.hdfs.MiniDFSCluster;
import org.apache.hadoop.minikdc.MiniKdc;
import org.apache.hadoop.security.UserGroupInformation;

public class SecureHdfs {
  static MiniKdc kdc(File dir, String realm) throws Exception {
    Properties props = MiniKdc.createConf();
    props.setProperty(MiniKdc.ORG_DOMAIN, realm.split("\\.")[1]);
    props.setProperty(MiniKdc.ORG_NAME, realm.split("\\.")[0]);
    props.setProperty(MiniKdc.TRANSPORT, "TCP");
    // Short tickets on request (a client's expiry is tested with a 5 s ticket).
    props.setProperty(MiniKdc.MIN_TICKET_LIFETIME, "1");
    dir.mkdirs();
    MiniKdc kdc = new MiniKdc(props, dir);
    kdc.start();
    return kdc;
  }

  public static void main(String[] args) throws Exception {
    File work = new File(args[0]);
    // A second KDC of the same realm, whose tickets for alice are not the cluster's. Started
    // first: MiniKdc points the JVM's krb5.conf at the KDC started last, the cluster's own.
    MiniKdc rogue = kdc(new File(work, "rogue-kdc"), "EXAMPLE.TEST");
    File rogueAlice = new File(work, "rogue-alice.keytab");
    rogue.createPrincipal(rogueAlice, "alice");
    MiniKdc kdc = kdc(new File(work, "kdc"), "EXAMPLE.TEST");
    String realm = kdc.getRealm();
    File service = new File(work, "service.keytab");
    kdc.createPrincipal(service, "hdfs/localhost", "HTTP/localhost");
    File alice = new File(work, "alice.keytab");
    kdc.createPrincipal(alice, "alice");
    File bob = new File(work, "bob.keytab");
    kdc.createPrincipal(bob, "bob");

    String hdfs = "hdfs/localhost@" + realm;
    String http = "HTTP/localhost@" + realm;
    String keytab = service.getAbsolutePath();
    Configuration conf = new HdfsConfiguration();
    conf.set("hadoop.security.authentication", "kerberos");
    conf.setBoolean("hadoop.security.authorization", true);
    conf.set("dfs.namenode.kerberos.principal", hdfs);
    conf.set("dfs.namenode.keytab.file", keytab);
    conf.set("dfs.datanode.kerberos.principal", hdfs);
    conf.set("dfs.datanode.keytab.file", keytab);
    conf.set("dfs.web.authentication.kerberos.principal", http);
    conf.set("dfs.web.authentication.kerberos.keytab", keytab);
    // Since Hadoop 3.3 WebHDFS stays on simple auth without these.
    conf.set("hadoop.http.authentication.type", "kerberos");
    conf.set("hadoop.http.authentication.kerberos.principal", http);
    conf.set("hadoop.http.authentication.kerberos.keytab", keytab);
    conf.setBoolean("hadoop.http.authentication.simple.anonymous.allowed", false);
    // The hadoop.auth cookie lives 3 s (default 10 h): a client running longer (a `wait`, an
    // exporter) logs in with SPNEGO again, with a renewed ticket, as it would after 10 h.
    conf.set("hadoop.http.authentication.token.validity", "3");
    conf.setBoolean("dfs.block.access.token.enable", true);
    conf.set("dfs.data.transfer.protection", "authentication");
    conf.set("dfs.http.policy", "HTTPS_ONLY");
    conf.set("dfs.namenode.https-address", "localhost:0");
    conf.set("dfs.datanode.https.address", "localhost:0");
    conf.set("dfs.datanode.address", "localhost:0");
    conf.set("dfs.client.https.keystore.resource", "ssl-client.xml");
    conf.set("dfs.https.server.keystore.resource", "ssl-server.xml");
    conf.setBoolean("dfs.webhdfs.enabled", true);
    conf.set("dfs.permissions.superusergroup", "supergroup");
    conf.set("hadoop.proxyuser.hdfs.hosts", "*");
    conf.set("hadoop.proxyuser.hdfs.groups", "*");
    UserGroupInformation.setConfiguration(conf);
    UserGroupInformation.loginUserFromKeytab(hdfs, keytab);

    MiniDFSCluster cluster =
        new MiniDFSCluster.Builder(conf, new File(work, "dfs")).numDataNodes(1).build();
    cluster.waitActive();
    FileSystem fs = cluster.getFileSystem();
    // /checkpoints: alice's (she writes checkpoints); /private: hdfs's only (a 403 for alice).
    fs.mkdirs(new Path("/checkpoints"));
    fs.setOwner(new Path("/checkpoints"), "alice", "supergroup");
    fs.mkdirs(new Path("/private"), new FsPermission((short) 0700));
    fs.setPermission(new Path("/private"), new FsPermission((short) 0700));
    fs.mkdirs(new Path("/user/alice"));
    fs.setOwner(new Path("/user/alice"), "alice", "supergroup");

    int https = cluster.getNameNode().getHttpsAddress().getPort();
    int rpc = cluster.getNameNodePort();
    String json =
        "{\"realm\": \"" + realm + "\", \"kdc_port\": " + kdc.getPort()
            + ", \"rogue_kdc_port\": " + rogue.getPort()
            + ", \"namenode_rpc_port\": " + rpc + ", \"namenode_https_port\": " + https
            + ", \"service_keytab\": \"" + keytab + "\""
            + ", \"alice_keytab\": \"" + alice.getAbsolutePath() + "\""
            + ", \"bob_keytab\": \"" + bob.getAbsolutePath() + "\""
            + ", \"rogue_alice_keytab\": \"" + rogueAlice.getAbsolutePath() + "\"}";
    File details = new File(work, "details.json");
    File partial = new File(work, "details.json.partial");
    Files.write(partial.toPath(), json.getBytes(StandardCharsets.UTF_8));
    partial.renameTo(details);
    System.out.println("SECURE HDFS READY " + json);
    System.out.flush();
    Thread.currentThread().join();
  }
}
