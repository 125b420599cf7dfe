.PHONY: test test-as-kafka test-kafka-matrix demo vet tidy chaos chaos-real chaos-kernel chaos-kernel-heal soak release release-check sim

# Every package of every module (go.work), race detector on. Tests that need Docker skip themselves
# where there is none.
test:
	go test -race -count=1 work

# Every broker test of internal/kafkatest with the embedded broker answering as Apache Kafka does
# where kfake is more lenient (kafkatest.AsKafka): KAFKA=3.9 for 3.9's answers, RUN=<regexp> for
# some tests only. `make test` and CI run the tests of Kafka's answers so already (startKafka,
# docs/testing.md); this runs the others so too.
KAFKA ?= 4.0
test-as-kafka:
	KAFKATEST_AS_KAFKA=$(KAFKA) go test -race -count=1 $(if $(RUN),-run '$(RUN)') ./internal/kafkatest/...

# The tests on Apache Kafka itself (internal/realkafka, realkafka/realtest, realkafka/askafka) once per
# version of KAFKA_VERSIONS (docs/testing.md#the-version-matrix): 3.9.x, the last 3.x line, where
# they run the classic protocol only (Cluster.KIP848: librdkafka 2.11.1 speaks KIP-848 only to
# 4.0 and later), 4.0.x and the newest 4.x, the version internal/realkafka/pom.xml pins. Each
# version's jars are fetched with mvn the first time. About 15 minutes per version on two cores.
# KAFKA_RUN=<regexp> runs some tests only (go test -run). A version's failure does not stop the
# others; the summary at the end says which passed, and the target fails if any did not.
KAFKA_NEWEST := $(shell sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' internal/realkafka/pom.xml)
KAFKA_VERSIONS ?= 3.9.2 4.0.2 $(KAFKA_NEWEST)
KAFKA_TIMEOUT ?= 60m
test-kafka-matrix:
	@summary=""; failed=0; \
	for v in $(KAFKA_VERSIONS); do \
		echo "=== Kafka $$v"; began=$$(date +%s); \
		if GONELI_KAFKA_VERSION=$$v GONELI_REAL_KAFKA=require go test -race -count=1 -timeout $(KAFKA_TIMEOUT) \
			$(if $(KAFKA_RUN),-run '$(KAFKA_RUN)') ./internal/realkafka/...; then verdict=pass; else verdict=FAIL; failed=1; fi; \
		summary="$$summary$$(printf '%-8s %s in %ss' "$$v" "$$verdict" "$$(( $$(date +%s) - began ))")\n"; \
	done; \
	printf '\n=== version matrix%s\n%b' "$(if $(KAFKA_RUN), (-run '$(KAFKA_RUN)'))" "$$summary"; \
	exit $$failed

demo:
	go run ./cmd/neli demo

vet:
	go vet work

# go mod tidy in every module (docs/modules.md; plain `go mod tidy` cannot resolve the v0.0.0
# requirements between them).
tidy:
	./.ci/tidy

# A release of every module at VERSION (docs/releasing.md): a dry run that builds the release in a
# scratch clone and checks it; TAG=1 then commits and tags it here, for you to push.
release:
	./.ci/release $(if $(TAG),-tag) $(VERSION)

# What CI checks of the module graph: every module built with GOWORK=off against the versions it
# requires, as `go install ...@version` would fetch them.
release-check:
	./.ci/release -check

# The long chaos run: CHAOS_TRIALS trials of CHAOS_FAULTS random faults each (200 in all by
# default, some 15 minutes), race detector on. Prints every fault and, at the end, the summary:
# trials, faults by kind, overlaps (must be 0), worst leaderless gap, failover per kind.
# CHAOS_SEED=<seed> replays a run's fault schedule; CHAOS_KINDS=sigkill,stall limits the kinds.
# CHAOS_ROLES=N gives every member N numbered roles (goneli.NewRoles) instead of the single leader:
# each role is checked for overlap on its own, faults aimed at a member prefer the one leading the
# most roles, and the summary adds the roles each fault hit and every role's overlaps (must be 0)
# and worst gap. Use N above CHAOS_MEMBERS (default 4), e.g. CHAOS_ROLES=8, for members to lead
# several roles each. CHAOS_ROLES=0 (the default) is the single leader; it also skips
# TestChaosRoles, the short roles trial that `go test ./chaos/` runs besides TestChaos.
# CHAOS_BROKERS=3 runs the members against a three-broker embedded cluster (default 1); restart
# then restarts all three brokers at once, and the draw adds coord-move, part-move, broker-cut,
# node-leave, rolling-restart and leave-cut. The summary says how many brokers were used. `go test ./chaos/` (CI) adds TestChaosBrokers, one short trial on
# three brokers (coord-move, broker-cut, rolling-restart, leave-cut); CHAOS_BROKERS skips it.
# CHAOS_REPORT=docs/chaos-results.md appends the summary to that page as a Markdown section, the
# page the docs publish runs on (docs/chaos.md).
CHAOS_TRIALS ?= 4
CHAOS_FAULTS ?= 50
# go test runs the suite in its package's directory: a report path is made absolute here.
chaos_report = $(if $(CHAOS_REPORT),CHAOS_REPORT=$(abspath $(CHAOS_REPORT)))
chaos:
	$(chaos_report) CHAOS_TRIALS=$(CHAOS_TRIALS) CHAOS_FAULTS=$(CHAOS_FAULTS) go test -race -count=1 -v -run '^TestChaos$$' -timeout 180m ./chaos/

# The chaos suite on Apache Kafka itself (issue 47; TestChaosReal, chaos/real_test.go): one trial of
# CHAOS_REAL_FAULTS random faults (100 by default, most of an hour on two cores) against a KRaft
# cluster of three Kafka nodes started by internal/realkafka (jars from Maven Central, cached under
# ~/.cache/goneli/kafka; skips without java and mvn, fails then with GONELI_REAL_KAFKA=require),
# members contending for CHAOS_REAL_ROLES roles each (8). The mix: member faults (sigterm, sigkill,
# stop-*, blackhole through a proxy per member and node) and broker faults (broker-kill,
# broker-restart, broker-pause, coord-move, part-move, broker-cut); real_test.go says which kfake
# kinds are left out and why. The other CHAOS_* settings apply (CHAOS_KINDS names only those kinds,
# CHAOS_SEED replays). CHAOS_REPORT=docs/chaos-real-results.md appends the summary to that page.
# GONELI_KAFKA_VERSION=4.0.2 runs another Kafka. `go test ./chaos/` skips it (CHAOS_REAL unset).
CHAOS_REAL_FAULTS ?= 100
CHAOS_REAL_ROLES ?= 8
chaos-real:
	$(chaos_report) CHAOS_REAL=1 CHAOS_TRIALS=1 CHAOS_FAULTS=$(CHAOS_REAL_FAULTS) CHAOS_ROLES=$(CHAOS_REAL_ROLES) go test -race -count=1 -v -run '^TestChaosReal$$' -timeout 180m ./chaos/

# The soak: trials of CHAOS_FAULTS faults (50 by default) start until SOAK_DURATION has passed,
# then the same summary as chaos. CHAOS_BROKERS, CHAOS_ROLES and the other CHAOS_* settings apply.
SOAK_DURATION ?= 1h
soak:
	$(chaos_report) CHAOS_DURATION=$(SOAK_DURATION) CHAOS_FAULTS=$(CHAOS_FAULTS) go test -race -count=1 -v -run '^TestChaos$$' -timeout 24h ./chaos/

# The kernel fault suite's long run (docs/chaos.md#kernel-faults), as root: members in network
# namespaces of their own, faults made by the kernel (BPF drops, an NFQUEUE delay, link down,
# signals). KERNEL_FAULTS random faults and every scenario of issue 29 at a 1 s lease, then
# KERNEL_DEFAULT_FAULTS at the default lease (5 s). KERNEL_REPORT=docs/kernel-faults-results.md
# appends each run's figures to that page. Needs iproute2 and iptables (Debian: apt-get install
# iproute2 iptables); skips without root or network namespaces.
KERNEL_FAULTS ?= 200
KERNEL_DEFAULT_FAULTS ?= 40
# go test runs the suite in its package's directory: a report path is made absolute here.
kernel_report = $(if $(KERNEL_REPORT),KERNEL_REPORT=$(abspath $(KERNEL_REPORT)))
chaos-kernel:
	$(kernel_report) KERNEL_FAULTS=$(KERNEL_FAULTS) go test -race -count=1 -v -run '^TestKernelFaults$$' -timeout 180m ./chaos/kernel/
	$(kernel_report) KERNEL_FAULTS=$(KERNEL_DEFAULT_FAULTS) KERNEL_LEASE=5s go test -race -count=1 -v -run '^TestKernelFaults$$' -timeout 180m ./chaos/kernel/

# Blackholes of the leader that heal within its group session, at the default lease (issue 29):
# whether leadership moves after the heal. KERNEL_MEMBER_ARGS="-X socket.timeout.ms=2500" tries a
# librdkafka setting; KERNEL_REPORT appends the table to a page as chaos-kernel does.
KERNEL_HEAL_CUTS ?= 3s,4.5s,5.5s
KERNEL_HEAL_REPS ?= 3
chaos-kernel-heal:
	$(kernel_report) KERNEL_HEAL_CUTS=$(KERNEL_HEAL_CUTS) KERNEL_HEAL_REPS=$(KERNEL_HEAL_REPS) go test -race -count=1 -v -run '^TestHealedCut$$' -timeout 60m ./chaos/kernel/

# The simulation's long search (docs/testing.md#the-simulation, issue 38): SIM_SCHEDULES schedules per
# profile (250,000 by default: 10^6 per group protocol, tens of minutes on 2 idle cores), seeds from
# SIM_SEED on (default: drawn from the clock and printed), the profiles of SIM_PROFILES
# (comma-separated; default all), on every core, without the race detector. Each violation is
# printed with its seed and timeline; replay one with go test ./internal/core -run TestSimReplay
# -sim.seed=N -sim.profile=P -v. SIM_STOP=first stops each profile at its first overlap; SIM_LIMIT=10m bounds each
# profile's wall time. SIM_REPORT=docs/simulation-results.md appends the results to that page.
SIM_SCHEDULES ?= 250000
sim_report = $(if $(SIM_REPORT),SIM_REPORT=$(abspath $(SIM_REPORT)))
sim:
	$(sim_report) SIM_SCHEDULES=$(SIM_SCHEDULES) SIM_SEED=$(SIM_SEED) SIM_PROFILES=$(SIM_PROFILES) SIM_STOP=$(SIM_STOP) SIM_LIMIT=$(SIM_LIMIT) \
		go test -count=1 -v -run '^TestSimSearch$$' -timeout 24h ./internal/core
