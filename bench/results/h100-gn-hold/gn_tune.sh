#!/bin/bash
# Tune (every candidate, --fresh) each GroupNorm problem key of gn_keys.txt (beside this script) into build/gn.db;
# run from the repository root after writing build/kf (a wrapper around `kfactory`).
while read -r key; do
  IFS=: read -r op layout dtype _rank spec <<< "$key"
  out=$(KFACTORY_SHIPPED=off timeout 60 build/kf tune --op "$op" --layout "$layout" --dtype "$dtype" --problem "$spec" \
        --db build/gn.db --fresh --reps 20 --json 2>&1 | tail -c 300 | tr '\n' ' ')
  echo "$key :: ${out: -160}"
done < "$(dirname "$0")/gn_keys.txt"
