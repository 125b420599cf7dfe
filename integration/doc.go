// Package integration runs goneli's leader-election scenarios against a broker chosen by the
// GONELI_KAFKA environment variable:
//
//	GONELI_KAFKA=kfake           (default) an embedded Kafka-protocol broker in the test process
//	GONELI_KAFKA=testcontainers  a real Apache Kafka in Docker, started by testcontainers-go;
//	                             skipped with a message where no Docker engine is reachable
//	GONELI_KAFKA=host:port       an existing cluster (its group.min.session.timeout.ms must
//	                             allow a 6 s session, as Kafka's default does)
//
// The network-cut scenario needs the embedded broker's fault injection and is skipped elsewhere.
// The package has only tests.
package integration
