#!/usr/bin/env bash
# Re-judge every committed example database with this checkout's judge and re-render every committed example
# report from it (issue 50 item 6). Run it after a change to the judge (gates, figures, the verdict policy);
# tests/project/test_examples_fresh.py fails while a stored verdict differs from what a re-judge decides.
#
#   bash scripts/regen-examples.sh            # every example (a few minutes on 2 cores)
#   bash scripts/regen-examples.sh h200x2     # only the folders named
#
# Databases stay gzipped (gzip -n: no name or time in the header, so an unchanged database is an unchanged
# file); each session is re-judged in place (`observatory judge`), oldest first: the history channel judges a
# night against the nights before it, as they are stored. Reports are rendered from their database:
# REPORTS lists folder, report, database, session. The README's screenshot (docs/img/report.png) is taken
# again from the three-engine report where Chromium is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
obs=${OBSERVATORY:-}
if [ -z "$obs" ]; then
  if [ -x .venv/bin/observatory ]; then obs=.venv/bin/observatory; else obs=observatory; fi
fi
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
only=("$@")
wanted() { [ ${#only[@]} -eq 0 ] && return 0; local d; for d in "${only[@]}"; do [[ $1 == examples/$d/* ]] && return 0; done; return 1; }

for gz in examples/*/*.db.gz; do
  wanted "$gz" || continue
  db=$work/$(basename "${gz%.gz}")
  gunzip -c "$gz" > "$db"
  for sid in $("$obs" sessions --db "$db" --json --limit 100000 | python3 -c 'import json,sys; print(" ".join(str(i) for i in sorted(s["id"] for s in json.load(sys.stdin))))'); do
    "$obs" -q judge "$sid" --db "$db" | sed "s|^|$gz: |"
  done
  gzip -n -9 -c "$db" > "$gz.new" && mv "$gz.new" "$gz"
done

# folder, report (a directory, or a .tgz holding report/), database, session
REPORTS=(
  "h200 report-tiny h200-tiny.db 1"
  "h200 report-hybrid h200-hybrid.db 1"
  "h200-nightly report-tiny nightly-tiny.db 1"
  "h200-nightly report-hybrid nightly-hybrid.db 1"
  "h200x2 report-parallel h200x2-parallel.db 1"
  "h200x2 report-sequential h200x2-parallel.db 2"
  "h200x2 report-tp2 h200x2-tp2.db 1"
  "h200-engines h200-three-engines-report.tgz h200-three-engines.db 1"
)
for row in "${REPORTS[@]}"; do
  read -r folder report dbname sid <<< "$row"
  wanted "examples/$folder/x" || continue
  db=$work/$dbname; gunzip -c "examples/$folder/$dbname.gz" > "$db"
  if [[ $report == *.tgz ]]; then
    "$obs" report "$sid" --db "$db" --out "$work/tgz/report" > /dev/null
    tar -C "$work/tgz" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf - report | gzip -n -9 > "examples/$folder/$report"
    if [ "$report" = h200-three-engines-report.tgz ] && command -v chromium > /dev/null; then
      py=$(dirname "$(command -v "$obs")")/python; [ -x "$py" ] || py=python3
      "$py" scripts/screenshot.py "$work/tgz/report/index.html" docs/img/report.png 1000 \
        || echo "docs/img/report.png not retaken (Pillow missing?)"  # the README's picture
    fi
    rm -rf "$work/tgz"
  else
    "$obs" report "$sid" --db "$db" --out "examples/$folder/$report" > /dev/null
  fi
  echo "examples/$folder/$report: session $sid re-rendered"
done

# tests/model/test_read_model.py pins show --json of the regenerated h200-tiny session byte for byte (the read model's
# shape): its fixture follows the database. Check its diff: a change beyond the re-judged figures is the read model's.
if wanted examples/h200/x; then
  gunzip -c examples/h200/h200-tiny.db.gz > "$work/tiny.db"
  "$obs" show --db "$work/tiny.db" --json | python3 -c 'import gzip, sys; sys.stdout.buffer.write(gzip.compress(sys.stdin.buffer.read(), mtime=0))' \
    > tests/fixtures/show_json/h200-tiny.json.gz
  echo "tests/fixtures/show_json/h200-tiny.json.gz: rewritten from examples/h200/h200-tiny.db.gz"
fi
