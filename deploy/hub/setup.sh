#!/usr/bin/env bash
# The course on a JupyterHub, on a fresh Debian or Ubuntu server: run as root, from a checkout of
# the course. docs/hub.md walks through it. Safe to run again (after a `git pull`, say): it keeps
# accounts, the teacher's course folder, the exchange and the hub's state.
#
#   sudo deploy/hub/setup.sh                      teacher account "teacher", no students yet
#   sudo TEACHER=ada STUDENTS="bo cy" deploy/hub/setup.sh
#
# Settings, from the environment:
#   TEACHER          the teacher's account (made when missing)             teacher
#   STUDENTS         the students' accounts, made when missing              (none)
#   PREFIX           the environment, the proxy and the hub's state         /opt/efficient-pytorch
#   EXCHANGE         nbgrader's exchange                                    /srv/nbgrader/exchange
#   HUB_DOMAIN       the hub's host name; <user>.HUB_DOMAIN must reach the
#                    same machine (a wildcard DNS record)                   hub.localhost
#   HUB_IP, HUB_PORT where the proxy listens                                0.0.0.0, 8000
#   HUB_API_PORT, PROXY_API_PORT, SERVICE_PORT
#                    the hub's, the proxy's API and the formgrader service's
#                    ports, all on 127.0.0.1                                8081, 8001, 8002
#   PYTHON           the system's Python (3.11 or newer), which every
#                    account can run; not one under root's home (pyenv)    /usr/bin/python3
#   STUDENT_PASSWORD set this password on the student accounts it makes     (none: set them yourself)
#   TEACHER_PASSWORD the same for the teacher                              (none)
# Start the hub with the command it prints at the end (or the systemd unit it writes).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
COURSE_ID=efficient-pytorch
COURSE_FOLDER=efficient-pytorch
TEACHER=${TEACHER:-teacher}
STUDENTS=${STUDENTS:-}
PREFIX=${PREFIX:-/opt/efficient-pytorch}
EXCHANGE=${EXCHANGE:-/srv/nbgrader/exchange}
HUB_DOMAIN=${HUB_DOMAIN:-hub.localhost}
HUB_IP=${HUB_IP:-0.0.0.0}
HUB_PORT=${HUB_PORT:-8000}
HUB_API_PORT=${HUB_API_PORT:-8081}
PROXY_API_PORT=${PROXY_API_PORT:-8001}
SERVICE_PORT=${SERVICE_PORT:-8002}
PYTHON=${PYTHON:-/usr/bin/python3}

say() { printf 'setup: %s\n' "$*"; }
die() { printf 'setup: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "run me as root: I make accounts and install into $PREFIX"

# -- packages: Python with venv, Node.js with npm (the proxy), bubblewrap (the grading sandbox) --
missing=()
[ -x "$PYTHON" ] || missing+=(python3)
"$PYTHON" -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3-venv)
command -v npm >/dev/null || missing+=(nodejs npm)
command -v bwrap >/dev/null || missing+=(bubblewrap)
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || die "the course needs Python 3.11 or newer"
# Every account runs this interpreter: one whose folders another account cannot enter is no use.
setpriv --reuid=65534 --regid=65534 --clear-groups "$PYTHON" -c pass 2>/dev/null \
  || die "$PYTHON cannot be run by other accounts; set PYTHON to the system's Python"

# -- accounts: one each, homes that no other account can enter ----------------------------------
make_account() {  # make_account NAME [PASSWORD]
  if ! id -u "$1" >/dev/null 2>&1; then
    useradd --create-home --shell /bin/bash "$1"
    say "made the account $1"
    if [ -n "${2:-}" ]; then printf '%s:%s\n' "$1" "$2" | chpasswd; fi
  fi
  chmod 0700 "$(getent passwd "$1" | cut -d: -f6)"
}
make_account "$TEACHER" "${TEACHER_PASSWORD:-}"
for student in $STUDENTS; do make_account "$student" "${STUDENT_PASSWORD:-}"; done
TEACHER_HOME=$(getent passwd "$TEACHER" | cut -d: -f6)

# -- the environment every account runs: made from the system's Python, readable by all ----------
# (not a virtual environment under a home folder, which other accounts cannot enter)
umask 022
mkdir -p "$PREFIX"
if [ ! -x "$PREFIX/venv/bin/python" ]; then
  say "making the environment in $PREFIX/venv"
  "$PYTHON" -m venv "$PREFIX/venv"
fi
say "installing the course's packages and JupyterHub (a few minutes the first time)"
"$PREFIX/venv/bin/pip" install --quiet --disable-pip-version-check -r "$REPO/requirements.txt" \
  -r "$HERE/requirements-hub.txt" "$REPO"

say "installing the proxy (configurable-http-proxy, pinned by package-lock.json)"
mkdir -p "$PREFIX/proxy"
cp "$HERE/proxy/package.json" "$HERE/proxy/package-lock.json" "$PREFIX/proxy/"
npm ci --prefix "$PREFIX/proxy" --omit=dev --no-audit --no-fund --loglevel=error >/dev/null

# -- what each role's Jupyter server loads (JUPYTER_CONFIG_PATH, set by the hub per role) --------
rm -rf "$PREFIX/etc"
cp -R "$HERE/etc" "$PREFIX/etc"
students_json=$(printf '%s\n' $STUDENTS | "$PYTHON" -c 'import json, sys; print(json.dumps(sys.stdin.read().split()))')
cat > "$PREFIX/etc/course.json" <<EOF
{
  "course_id": "$COURSE_ID",
  "course_folder": "$COURSE_FOLDER",
  "exchange": "$EXCHANGE",
  "prefix": "$PREFIX",
  "teacher": "$TEACHER",
  "teacher_home": "$TEACHER_HOME",
  "students": $students_json,
  "domain": "$HUB_DOMAIN",
  "ip": "$HUB_IP",
  "port": $HUB_PORT,
  "hub_port": $HUB_API_PORT,
  "proxy_api_port": $PROXY_API_PORT,
  "service_port": $SERVICE_PORT,
  "omp_threads": 1
}
EOF
chmod -R a+rX "$PREFIX/venv" "$PREFIX/proxy" "$PREFIX/etc"

# -- the exchange: anyone may hand in, nobody may delete another's files (sticky) ---------------
# nbgrader makes <exchange>/<course>/inbound writable but not listable by students on release.
mkdir -p "$EXCHANGE"
chmod 1777 "$EXCHANGE"

# -- the teacher's course: source/ and the grader's configuration, the teacher's own -------------
course="$TEACHER_HOME/$COURSE_FOLDER"
if [ ! -e "$course/nbgrader_config.py" ]; then
  say "copying the course into $course"
  mkdir -p "$course"
  cp -R "$REPO/source" "$REPO/nbgrader_config.py" "$course/"
  chown -R "$TEACHER:" "$course"
fi

# -- the hub: configuration and state, root's alone ----------------------------------------------
mkdir -p "$PREFIX/hub"
chmod 0700 "$PREFIX/hub"
cp "$HERE/jupyterhub_config.py" "$PREFIX/hub/jupyterhub_config.py"
start="cd $PREFIX/hub && $PREFIX/venv/bin/jupyterhub -f $PREFIX/hub/jupyterhub_config.py"
if [ -d /run/systemd/system ]; then
  cat > /etc/systemd/system/efficient-pytorch-hub.service <<EOF
[Unit]
Description=JupyterHub of the efficient-pytorch course
After=network.target

[Service]
WorkingDirectory=$PREFIX/hub
ExecStart=$PREFIX/venv/bin/jupyterhub -f $PREFIX/hub/jupyterhub_config.py
Restart=on-failure

[Install]
WantedBy=multi-user.target
EOF
  systemctl daemon-reload
  say "start the hub: systemctl enable --now efficient-pytorch-hub"
else
  say "start the hub: $start"
fi
say "then open http://$HUB_DOMAIN:$HUB_PORT/ and log in as $TEACHER"
