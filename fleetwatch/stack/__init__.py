"""The local stack: a single-node KRaft Kafka broker and a Mosquitto broker on loopback."""
