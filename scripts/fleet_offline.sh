#!/usr/bin/env bash
# A tuning fleet on one GPU machine without network or apt: a throwaway PostgreSQL server, `kfactory
# enqueue` of 20 random GroupNorm-backward problems, `kfactory worker --gpus 0,0` (two workers sharing
# GPU 0) until the queue drains, then `kfactory query` of a few and `kfactory jobs`. Run from the
# repository root (or anywhere: it changes there) with $OUT set; carried: .whl-fleet/ and this file.
#
#   .whl-fleet/*.whl          alembic, Mako, SQLAlchemy, greenlet, psycopg + psycopg-binary, platformdirs,
#                             typing_extensions (Python 3.12, manylinux x86_64), installed into .site/
#   .whl-fleet/server/*.whl   pgserver's wheel: PostgreSQL 16 binaries (libc and zlib only), unpacked
#                             under /tmp; its Python part is not used
#
# The server runs as a non-root account (initdb refuses root): `postgres` if it exists, else one made
# with useradd, else `nobody`. Everything comes back in at most 8 files under $OUT.
# Knobs: PYTHON (python3), FLEET_PG_ACCOUNT (the server's account when run as root), FLEET_PROBLEMS ("--random 20 --seed 5 --ops groupnorm_bwd"), FLEET_GPUS (0,0),
# FLEET_REPS (25), FLEET_TIMEOUT (seconds for the workers, 420).
set -uo pipefail
cd "$(dirname "$0")/.."
: "${OUT:?set OUT to a directory for the logs}"
mkdir -p "$OUT"
exec > >(tee -a "$OUT/fleet_h100.log") 2>&1
PY=${PYTHON:-python3}
PROBLEMS=${FLEET_PROBLEMS:---random 20 --seed 5 --ops groupnorm_bwd}
GPUS=${FLEET_GPUS:-0,0}
REPS=${FLEET_REPS:-25}
LIMIT=${FLEET_TIMEOUT:-420}
step() { echo; echo "== $(date -u +%H:%M:%S) $*"; }

step "python packages from .whl-fleet"
"$PY" --version
"$PY" -m pip install -q --no-index --no-deps --target .site .whl-fleet/*.whl || exit 1
export PYTHONPATH=$PWD/.site:$PWD${PYTHONPATH:+:$PYTHONPATH}
export KFACTORY_CACHE_DIR=${KFACTORY_CACHE_DIR:-/tmp/kfactory-cache}
"$PY" -c "import sqlalchemy, alembic, psycopg, platformdirs; print('sqlalchemy', sqlalchemy.__version__, '| alembic',
alembic.__version__, '| psycopg', psycopg.__version__, psycopg.pq.__impl__)" || exit 1
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader

step "PostgreSQL server from the pgserver wheel"
PGROOT=$(mktemp -d /tmp/kfpg-XXXXXX)
chmod 755 "$PGROOT"
"$PY" - "$PGROOT" .whl-fleet/server/pgserver-*.whl <<'EOF' || exit 1
import os, sys, zipfile
root, wheel = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as z:
    for info in z.infolist():
        if info.filename.startswith(("pgserver/pginstall/", "pgserver.libs/")) and not info.is_dir():
            path = z.extract(info, root)
            os.chmod(path, (info.external_attr >> 16) & 0o777 or 0o644)
for folder, dirs, _ in os.walk(root):
    for d in dirs:
        os.chmod(os.path.join(folder, d), 0o755)
print("unpacked", wheel, "into", root)
EOF
PG=$PGROOT/pgserver/pginstall
export LD_LIBRARY_PATH=$PG/lib:$PGROOT/pgserver.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
ACCOUNT=""
if [ "$(id -u)" = 0 ]; then
  if [ -n "${FLEET_PG_ACCOUNT:-}" ]; then ACCOUNT=$FLEET_PG_ACCOUNT
  elif id postgres >/dev/null 2>&1; then ACCOUNT=postgres
  elif id kfpg >/dev/null 2>&1 || useradd --system --no-create-home --shell /bin/false kfpg 2>/dev/null; then ACCOUNT=kfpg
  else ACCOUNT=nobody
  fi
  chown "$ACCOUNT" "$PGROOT"
  echo "running the server as $ACCOUNT (initdb refuses root)"
fi
as_server() {  # run a command as the server's account, keeping the environment (LD_LIBRARY_PATH)
  if [ -z "$ACCOUNT" ]; then "$@"; return; fi
  "$PY" -c 'import os, pwd, sys
p = pwd.getpwnam(sys.argv[1]); os.setgroups([]); os.setgid(p.pw_gid); os.setuid(p.pw_uid)
os.execvpe(sys.argv[2], sys.argv[2:], os.environ)' "$ACCOUNT" "$@"
}
PORT=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
(cd "$PGROOT" && as_server "$PG/bin/initdb" -D "$PGROOT/data" -U kfactory -A trust -E UTF8 --no-sync >/dev/null) || exit 1
(cd "$PGROOT" && as_server "$PG/bin/pg_ctl" -D "$PGROOT/data" -l "$PGROOT/server.log" -w -o \
  "-p $PORT -k $PGROOT -c listen_addresses=127.0.0.1 -c max_connections=100" start) || { cat "$PGROOT/server.log"; exit 1; }
stop_server() {
  (cd "$PGROOT" && as_server "$PG/bin/pg_ctl" -D "$PGROOT/data" -m fast -w stop >/dev/null)
  echo "== server log (last lines)"; tail -n 20 "$PGROOT/server.log"
  rm -rf "$PGROOT"
}
trap stop_server EXIT
"$PY" -c "import psycopg; c = psycopg.connect(host='127.0.0.1', port=$PORT, user='kfactory', dbname='postgres',
autocommit=True); c.execute('CREATE DATABASE kfactory'); print(c.execute('SELECT version()').fetchone()[0])" || exit 1
export KFACTORY_DB=postgresql+psycopg://kfactory@127.0.0.1:$PORT/kfactory
kf() { "$PY" -m factory.cli "$@"; }

step "kfactory db upgrade"
kf db upgrade || exit 1

step "kfactory enqueue $PROBLEMS"
# shellcheck disable=SC2086
kf enqueue $PROBLEMS --json > "$OUT/enqueue.json" || { cat "$OUT/enqueue.json"; exit 1; }
"$PY" -c "import json; d = json.load(open('$OUT/enqueue.json')); print(d['added'], 'added,', d['present'], 'present,',
len(d['unservable']), 'left out, devices', d['devices'])"
kf jobs

step "kfactory worker --gpus $GPUS --drain (at most $LIMIT s)"
start=$(date +%s)
timeout "$LIMIT" "$PY" -m factory.cli worker --gpus "$GPUS" --drain --poll 1 --reps "$REPS" 2>&1 | tee "$OUT/worker.log"
echo "workers exited with ${PIPESTATUS[0]} after $(( $(date +%s) - start )) s"

step "kfactory jobs"
kf jobs | tee "$OUT/jobs.txt"
kf jobs --json > "$OUT/jobs.json"
kf jobs --devices

step "kfactory query of three tuned problems"
"$PY" - > "$OUT/queries.txt" 2>&1 <<'EOF'
import subprocess, sys
from tuning_db import JobState, TuningDB
with TuningDB() as db:
    done = [job for job in db.jobs.jobs(JobState.DONE) if job.winner_instance][:3]
    per_owner = {}
    for job in db.jobs.jobs(JobState.DONE):
        per_owner[job.owner] = per_owner.get(job.owner, 0) + 1
print("done jobs per worker:", per_owner)
for job in done:
    op, layout, dtype, _rank, spec = job.problem_key.split(":", 4)
    print(f"== job {job.id} (attempts {job.attempts}, by {job.owner}): stored winner {job.winner_instance} {job.winner_us:.2f} us")
    sys.stdout.flush()
    subprocess.run([sys.executable, "-m", "factory.cli", "query", "--op", op, "--layout", layout, "--dtype", dtype,
                    "--problem", spec], check=False)
EOF
cat "$OUT/queries.txt"

step "kfactory db stats"
kf db stats --json | tee "$OUT/stats.json"
