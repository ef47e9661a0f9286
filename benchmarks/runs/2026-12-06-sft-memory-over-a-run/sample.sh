#!/bin/bash
# sample.sh OUT CMD...: run CMD, write "seconds rss_mb" of it and its children every second
out=$1; shift
"$@" > "$out.log" 2>&1 &
pid=$!
t0=$(date +%s)
while kill -0 $pid 2>/dev/null; do
  r=$(ps -o rss= --ppid $pid -p $pid | awk '{s+=$1} END {print int(s/1024)}')
  echo "$(( $(date +%s) - t0 )) $r" >> "$out.rss"
  sleep 1
done
wait $pid; echo "rc $?" >> "$out.rss"
