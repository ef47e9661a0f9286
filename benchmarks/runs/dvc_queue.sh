# Shell pieces the agent sweeps share (sourced by 2026-12-05-agent-*/run.sh): the clone's environment, timestamps on
# every line, the clone taking a commit's code, and DVC's experiment queue run to its end.
# shellcheck shell=bash

# in_clone CLONE: work in the clone with /work/main's venv and the clone's own code on the path
in_clone() {
  cd "$1"
  export PYTHONPATH="$1/src" PATH="/work/main/.venv/bin:$PATH" DVC_NO_ANALYTICS=1
}

stamp() { while IFS= read -r line; do printf '%s %s\n' "$(date +%H:%M:%S)" "$line"; done; }

# take_code REPO COMMIT: commit the clone's state, then check out COMMIT's code and configuration, params composed
take_code() {
  git diff --quiet HEAD || git -c user.name=bench -c user.email=b@b commit -qam "round state"
  git fetch -q "$1" "$2" && git checkout FETCH_HEAD -- src dvc.yaml conf
  clap params
}

# commit_baseline COMMIT: the clone's state as the baseline every queued experiment starts from
commit_baseline() { git add -A && git -c user.name=bench -c user.email=b@b commit -qm "baseline at $1"; }

# run_queue: start one worker and wait until nothing is running or queued
run_queue() {
  echo "== queue start"
  dvc queue start -j 1
  sleep 30
  while [[ $(dvc queue status 2>/dev/null) =~ Running|Queued ]]; do sleep 30; done  # not `| grep -q`: pipefail
  dvc queue status
  echo "== done"
}
