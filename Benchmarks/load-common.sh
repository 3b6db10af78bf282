# Shared by the load scripts (sourced, not run): the release build, sandbox receipts as
# request bodies, and one wrk phase of Benchmarks/redeem.lua.

# build_coffer: builds `coffer` in release into .build-release/ and sets BIN; with COFFER_BIN
# set, measures that binary instead (a build of another commit, for a before/after).
build_coffer() {
    if [ -n "${COFFER_BIN:-}" ]; then
        BIN=$COFFER_BIN
        echo "measuring $BIN (COFFER_BIN)" >&2
        return
    fi
    echo "building coffer (release) …" >&2
    swift build -c release --product coffer --scratch-path .build-release >&2
    BIN=$PWD/.build-release/release/coffer
}

# ports_free PORT…: stops the script if anything already listens on one of these ports of
# 127.0.0.1 — a server left from an earlier run would answer wait_healthy and be measured
# instead of this run's. Called right before a server starts. PORT=… picks others.
ports_free() {
    local port
    for port in "$@"; do
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            echo "port $port is in use on 127.0.0.1: stop what listens there, or pick other ports with PORT=…" >&2
            exit 2
        fi
    done
}

# wait_healthy PORT [PID]: until GET /healthz answers (10 s at most); with PID, fails as soon
# as that process has exited (a port it could not take, a bad option), and if it has exited
# by the time the port answers (then something else answered).
wait_healthy() {
    local port=$1 pid=${2:-}
    for _ in $(seq 1 100); do
        if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
            echo "the server for port $port exited" >&2
            return 1
        fi
        if curl -sf "http://127.0.0.1:$port/healthz" >/dev/null; then
            [ -z "$pid" ] || kill -0 "$pid" 2>/dev/null || { echo "the server for port $port exited; something else answers there" >&2; return 1; }
            return 0
        fi
        sleep 0.1
    done
    echo "the server on port $port did not become healthy" >&2
    return 1
}

# mint_bodies SANDBOX_DIR COUNT OUT SHARDS: COUNT fresh sandbox receipts for the demo
# product, as one JSON body per line, dealt round-robin into OUT/bodies-1.ndjson …
# OUT/bodies-SHARDS.ndjson (one file per load generator, so that none replays another's);
# synced to the disk before it returns.
mint_bodies() {
    local sandbox=$1 count=$2 out=$3 shards=$4
    echo "minting $count sandbox receipts …" >&2
    rm -rf "$out/receipts"
    "$BIN" sandbox receipt --dir "$sandbox" --bundle-id com.coffer.demo --purchase com.coffer.demo.levelpack1:1000000 \
        --count "$count" --out-dir "$out/receipts" >/dev/null
    python3 - "$out" "$shards" <<'PY'
import base64, os, sys
out, shards = sys.argv[1], int(sys.argv[2])
files = [open(os.path.join(out, "bodies-%d.ndjson" % (k + 1)), "w") for k in range(shards)]
for i, name in enumerate(sorted(os.listdir(os.path.join(out, "receipts")))):
    with open(os.path.join(out, "receipts", name), "rb") as r:
        files[i % shards].write('{"receipt":"%s"}\n' % base64.b64encode(r.read()).decode())
for f in files:
    f.close()
PY
    # The receipts' files and the bodies are written back to the disk here, not 30 s later
    # (the kernel's dirty_expire) during a phase, where that writeback would compete with the
    # fsyncs being measured.
    sync
}

# run_wrk OUTFILE PORT BODIES START COUNT RATE CONNECTIONS: one wrk process (THREADS
# threads, SECONDS_EACH seconds) posting bodies START… of BODIES to PORT; RATE 0 = as fast
# as it goes. Writes rate, percentiles, statuses and requests to OUTFILE, and every latency
# recorded ("microseconds count" lines) to OUTFILE.hist.
run_wrk() {
    local outfile=$1 port=$2 bodies=$3 start=$4 count=$5 rate=$6 connections=$7
    BODIES="$bodies" THREADS=$T CONNECTIONS=$connections START=$start COUNT=$count RATE=$rate HISTOGRAM="$outfile.hist" \
        wrk -t"$T" -c"$connections" -d"${S}s" --timeout 5s -s Benchmarks/redeem.lua "http://127.0.0.1:$port" >"$outfile"
}

# disk_probe SECONDS DIR: while a phase runs, how long the disk holding DIR takes to flush —
# 25 times a second, one 8 KiB overwrite of a file written and synced beforehand (no block
# allocation, no journal commit: a bare data flush, as PostgreSQL's reused WAL segments
# have) and fdatasync; 25 flushes/s is little beside the hundreds the database makes.
# Prints one line: p50, p99 and max in ms, how many flushes took over 20 ms and how long they
# took beyond 20 ms in all (a flush is waited for whole: a stall that began during it counts
# in full, a stall of under 40 ms between two flushes may go unseen). A shared
# disk's stalls show here as well as in the phase's percentiles: they are the disk's, not
# the server's.
disk_probe() {
    python3 - "$1" "$2" <<'PY'
import os, sys, time
seconds, where = float(sys.argv[1]), sys.argv[2]
path = os.path.join(where, "disk-probe.dat")
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
block, took, i = b"x" * 8192, [], 0
os.write(fd, block * 128)
os.fsync(fd)
begin = time.monotonic()
while time.monotonic() < begin + seconds:
    start = time.perf_counter()
    os.pwrite(fd, block, (i % 128) * 8192)
    os.fdatasync(fd)
    took.append((time.perf_counter() - start) * 1000)
    i += 1
    time.sleep(max(0, begin + i * 0.04 - time.monotonic()))
os.close(fd)
os.unlink(path)
took.sort()
print("disk flush p50 %.2f ms, p99 %.2f ms, max %.1f ms; %d of %d over 20 ms, %d ms beyond 20 ms in them" % (
    took[len(took) // 2], took[len(took) * 99 // 100], took[-1], sum(t > 20 for t in took), len(took),
    sum(t - 20 for t in took if t > 20)))
PY
}

# build_probes: builds Benchmarks/disk_stalls.c and Benchmarks/host_stalls.c into
# .build-release/ (before the phases: a compiler running during one would take its cores)
# and sets DISK_STALLS and HOST_STALLS (empty for one that did not build: its line then says so).
build_probes() {
    local name var
    for name in disk_stalls host_stalls; do
        var=$(echo "$name" | tr a-z A-Z)
        printf -v "$var" '%s' "$PWD/.build-release/$name"
        if [ ! -x "${!var}" ] || [ "Benchmarks/$name.c" -nt "${!var}" ]; then
            mkdir -p .build-release
            cc -O2 -o "${!var}" "Benchmarks/$name.c" || { echo "$name.c did not build: no line of it" >&2; printf -v "$var" '%s' ""; }
        fi
    done
}

# disk_watch SECONDS DIR: while a phase runs, the stalls of the block device holding DIR, seen
# through its statistics (Benchmarks/disk_stalls.c, see build_disk_stalls): the spans in
# which it held I/O in flight and completed none, sampled every 2 ms. It adds no I/O and sees
# the stalls between disk_probe's flushes, which a flush issued 25 times a second misses.
# Prints one line: how many spans took over 20 ms, the longest, and how long they took beyond
# 20 ms in all (each span a lower bound); or why it could not (DIR not on a block device).
disk_watch() {
    local seconds=$1 dir=$2 dev major minor
    [ -x "${DISK_STALLS:-}" ] || { echo "disk device: disk_stalls was not built (build_probes)"; return 0; }
    dev=$(stat -c '%d' "$dir")
    major=$(((dev >> 8) & 0xfff))
    minor=$(((dev & 0xff) | ((dev >> 12) & 0xfff00)))
    if [ ! -r "/sys/dev/block/$major:$minor/stat" ]; then
        echo "disk device: no statistics for $dir (device $major:$minor is not a block device)"
        return 0
    fi
    "$DISK_STALLS" "/sys/dev/block/$major:$minor/stat" "$seconds"
}

# host_watch SECONDS: while a phase runs, the spans in which this machine ran nothing of ours
# (Benchmarks/host_stalls.c, see build_probes): a thread at real-time priority (as root)
# that sleeps 1 ms at a time and counts the wake-ups over 20 ms late, with the time the
# hypervisor took the CPUs away for (steal) around them. A busy server delays it not at all
# (it preempts every normal task), so a late wake-up is the kernel's or the hypervisor's, and
# a stall the servers' clients saw with none here was the servers' (or PostgreSQL's, or the
# disk's: see disk_probe). Prints one line.
host_watch() {
    [ -x "${HOST_STALLS:-}" ] || { echo "host: host_stalls was not built (build_probes)"; return 0; }
    "$HOST_STALLS" "$1"
}

# field NAME FILE: the value after the first "NAME:" in a wrk output file.
field() { awk -v k="$1:" '{for (i = 1; i < NF; i++) if ($i == k) {print $(i + 1); exit}}' "$2"; }

# percentiles FILE…: p50, p90 and p99 in ms (as "p50_ms: … p90_ms: … p99_ms: …") of all the
# latencies of these histograms (run_wrk's OUTFILE.hist) together.
percentiles() {
    sort -n -k1,1 "$@" | awk '{value[NR] = $1; count[NR] = $2; n += $2} END {
        split("50 90 99", ps, " "); seen = 0; k = 1
        for (i = 1; i <= NR && k <= 3; i++) {
            seen += count[i]
            while (k <= 3 && seen >= ps[k] / 100 * n) { out[k] = value[i]; k++ }
        }
        printf "p50_ms: %.2f p90_ms: %.2f p99_ms: %.2f\n", out[1] / 1000, out[2] / 1000, out[3] / 1000
    }'
}

# corrected INTERVAL_US FILE…: these histograms (run_wrk's OUTFILE.hist) corrected for
# coordinated omission, as HdrHistogram's recordValueWithExpectedInterval (and wrk2) do. A
# paced connection sends its next request only after the last one's answer, so a stall of
# L µs delays one request by L where clients arriving on their own schedule would have sent
# L / INTERVAL_US more behind it: each latency L is recorded again as L − INTERVAL_US,
# L − 2 × INTERVAL_US, … while at least INTERVAL_US, with its count. INTERVAL_US: the time
# between one connection's requests at the paced rate (connections × 10⁶ / rate). Pipe to
# percentiles.
corrected() {
    local interval=$1
    shift
    awk -v iv="$interval" '{print; for (x = $1 - iv; x >= iv; x -= iv) print x, $2}' "$@"
}

# postgres_pids CLUSTER: the PostgreSQL server's processes of a throwaway cluster
# (scripts/postgres-throwaway.sh): the postmaster and its children (backends, WAL writer…).
postgres_pids() {
    [ -f "$1/data/postmaster.pid" ] || return 0
    local pm
    pm=$(head -1 "$1/data/postmaster.pid")
    echo "$pm" $(ps -o pid= --ppid "$pm")
}

# ticks PID…: "PID TICKS" per live process (user + system clock ticks used so far).
ticks() {
    local pid
    for pid in "$@"; do [ -r "/proc/$pid/stat" ] && awk -v p="$pid" '{print p, $14 + $15}' "/proc/$pid/stat"; done
    return 0
}

# spent BEFORE AFTER: CPU seconds used between two `ticks` outputs. A process that started
# in between (a backend for a new connection) counts in full; one that ended is not seen.
spent() {
    awk -v k="$(getconf CLK_TCK)" 'NR == FNR {if (NF == 2) before[$1] = $2; next} NF == 2 {s += $2 - ($1 in before ? before[$1] : 0)} END {print s / k}' \
        <(echo "$1") <(echo "$2")
}

# warm_wal URL SEGMENTS: writes SEGMENTS WAL segments and checkpoints, so that the server has
# segments to reuse, as one in service has (see load-postgres.sh, WARM_WAL).
warm_wal() {
    psql "$1" -qAtX -v ON_ERROR_STOP=1 >/dev/null <<SQL
CREATE TABLE coffer_bench_warm (x int);
DO \$\$ BEGIN FOR i IN 1..$2 LOOP INSERT INTO coffer_bench_warm VALUES (i); PERFORM pg_switch_wal(); END LOOP; END \$\$;
DROP TABLE coffer_bench_warm;
CHECKPOINT;
SQL
}
