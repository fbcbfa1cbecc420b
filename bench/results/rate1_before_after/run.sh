#!/bin/bash
# Rate 1 before and after the change that follows sampled flows only,
# interleaved: kernel and daemon CPU per kept-alive request and per churn
# connection. OLD_BUILD: a build of the tree before it (commit 26e98e2).
set -euo pipefail
cd "$(dirname "$0")/../../.."
OUT=bench/results/rate1_before_after
OLD_BUILD=${OLD_BUILD:?a build directory of commit 26e98e2}
for rep in 1 2 3; do
  for b in new old; do
    B=$([ $b = new ] && echo build || echo "$OLD_BUILD")
    TCPSCOPE_BUILD=$B python3 bench/keepalive.py --sizes 2000 --seconds 10 --connections 64 --cost-only \
      --variants tcpscope-every --out $OUT/ab-ka-$b-$rep.json
  done
done
for rep in 1 2; do
  for b in new old; do
    if [ $b = new ]; then B=build; V=tcpscope-default-every; else B=$OLD_BUILD; V=tcpscope-default; fi
    TCPSCOPE_BUILD=$B python3 bench/floor.py --variants $V --seconds 10 --reps 0 --out $OUT/ab-churn-$b-$rep.json
  done
done
