// The deployed Kafka's health check, as far as the login goes: kafka-broker-api-versions.sh
// --command-config FILE is the Java admin client with FILE's properties. This is that client,
// asking the broker at args[0] who is in the cluster; exit 0 if it answered.
// Run with the broker's jars: java -cp '.cache/jvm/kafka/*' KafkaLoginProbe.java HOST:PORT FILE

import java.io.FileReader;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;

public class KafkaLoginProbe {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        try (FileReader reader = new FileReader(args[1])) {
            props.load(reader);
        }
        props.put("bootstrap.servers", args[0]);
        props.put("request.timeout.ms", "5000");
        props.put("default.api.timeout.ms", "8000");
        try (Admin admin = Admin.create(props)) {
            admin.describeCluster().nodes().get(10, TimeUnit.SECONDS);
            System.out.println("answered");
        } catch (Exception e) {
            System.out.println("refused: " + e);
            System.exit(1);
        }
    }
}
