set -e
cd /work/main
for v in old new; do
  src=/work/main/src; [ $v = old ] && src=/tmp/ing/old/src
  PYTHONPATH=$src .venv/bin/python benchmarks/bench_tatqa.py --convert-only --clap-src $src --out /tmp/ing/p-$v > /tmp/ing/conv-$v.log 2>&1
  (cd /tmp/ing/p-$v && PATH=/work/main/.venv/bin:$PATH PYTHONPATH=$src /usr/bin/time -f "%e s" /work/main/.venv/bin/dvc repro ingest > /tmp/ing/ingest-$v.log 2>&1)
  (cd /tmp/ing/p-$v && find data/raw -type f | sort | xargs sha256sum > /tmp/ing/hash-$v.txt)
done
diff <(sed 's#/tmp/ing/p-[a-z]*/##' /tmp/ing/hash-old.txt) <(sed 's#/tmp/ing/p-[a-z]*/##' /tmp/ing/hash-new.txt) && echo SAME
