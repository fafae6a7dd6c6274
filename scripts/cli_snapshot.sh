#!/usr/bin/env bash
# Snapshot of the CLI's observable behaviour: every command's --help, and human and --json output, stderr and exit
# code of the commands run on the bundled WordNet sample (plus a few refusals), one file per run.
#
#   scripts/cli_snapshot.sh OUT_DIR [REPO]    # REPO: the checkout to import vecbridge from (default: this one)
#   diff -r /tmp/cli_before /tmp/cli_after    # empty when the CLI behaves the same
#
# Everything runs in one fixed work folder ($VB_SNAPSHOT_WORK, recreated) so paths agree between runs; timings,
# rates, timestamps and run-to-run byte counts are masked at the end. Needs no server, no network, no model.
set -u
OUT=${1:?usage: cli_snapshot.sh OUT_DIR [REPO]}
REPO=$(cd "${2:-$(dirname "$0")/..}" && pwd)
W=${VB_SNAPSHOT_WORK:-/tmp/vecbridge-snapshot-work}
rm -rf "$W" "$OUT"
mkdir -p "$W" "$OUT"
OUT=$(cd "$OUT" && pwd)
export PYTHONPATH="$REPO" COLUMNS=120 LINES=50 TERM=dumb NO_COLOR=1 PYTHONHASHSEED=0 HF_HUB_OFFLINE=1
unset VECBRIDGE_DEBUG RAY_ADDRESS

# NAME ARGS...: run `vecbridge ARGS...` in $W, stdin closed; OUT/NAME.{out,err,rc}
run() {
    local name=$1
    shift
    local t0=$SECONDS
    (cd "$W" && python -c 'from vecbridge.cli import main; main(prog_name="vecbridge")' "$@" \
        >"$OUT/$name.out" 2>"$OUT/$name.err" </dev/null
     echo "rc=$?" >"$OUT/$name.rc")
    echo "$((SECONDS - t0)) $name" >>"$W/timings.txt"
}

NEWM=vecbridge.sample:recorded_new_model
OLDM=vecbridge.sample:recorded_old_model

# ---- help of every command (the command list itself is part of the snapshot)
run help --help
run version --version
for cmd in fit link evaluate migrate merge verify search report info demo drift "drift run" "drift watch" \
           "drift history" upgrade "upgrade plan" "upgrade start" "upgrade reembed" "upgrade status" \
           "upgrade search" "upgrade tune" "upgrade query-log" "upgrade cutover" "upgrade rollback" \
           "upgrade finalize"; do
    # shellcheck disable=SC2086
    run "help_${cmd// /_}" $cmd --help
done
run help_short fit -h
run no_such_command frobnicate

# ---- the demo builds the collections the rest uses
run demo_json demo --workdir "$W/demo" --json
run demo_human demo --workdir "$W/demo2"
rm -rf "$W/demo2"
D=$W/demo
OLD=file://$D/old
NEWS=file://$D/new_sample
FULL=file://$D/reference_full_reembed
(cd "$W" && python - <<'EOF'
import numpy as np
from vecbridge.connectors import VectorBatch, connect
from vecbridge.sample import load_wordnet_sample

s = load_wordnet_sample()
rel = [s.ids[r] for r in s.query_rows]
for name, vecs in (("q_new", s.queries_new), ("q_old", s.queries_old)):
    c = connect(f"file://./{name}")
    c.create(dim=vecs.shape[1], metric="cosine")
    c.upsert(VectorBatch(rel, vecs, None))
np.save("q_new.npy", s.queries_new[:3])
np.save("q_old.npy", s.queries_old[:3])
np.save("hub.npy", s.queries_new[:200])
with open("pairs.csv", "w") as f:
    f.write("source_id,target_id\n" + "".join(f"{i},{i}\n" for i in s.ids[:600]))
with open("seeds.csv", "w") as f:
    f.write("source_id,target_id\n" + "".join(f"{i},{i}\n" for i in s.ids[:25]))
b = connect("file://./b_part")
b.create(dim=768, metric="cosine")
b.upsert(VectorBatch(s.ids[:200], s.docs_new[:200], [{"text": it["doc"]} for it in s.items[:200]]))
EOF
)
printf 'not json' >"$W/bad.json"
printf 'not a database at all, just text.........................................................' >"$W/bad.sqlite"
printf '[check]\nname = "wordnet"\nold = "%s"\nnew = "%s"\nalignment = "demo/align.vb"\nsample = 400\n\n[probe]\nqueries = "file://%s/q_new"\nk = 10\n' \
    "$OLD" "$FULL" "$W" >"$W/drift.toml"
printf '[check]\nold = "x"\n' >"$W/bad_drift.toml"

# ---- fit / info / link
run fit_json fit --source "$OLD" --target "$NEWS" --holdout 0.2 --source-model a --target-model b -o "$W/a.vb" --json
run fit_human fit --source "$OLD" --target "$NEWS" --holdout 0.2 -o "$W/a2.vb"
run fit_pairs_file fit --source "$OLD" --target "$NEWS" --pairs "file:$W/pairs.csv" --center --scale -o "$W/p.vb"
run fit_ridge_json fit --source "$OLD" --target "$NEWS" --method ridge --max-pairs 500 -o "$W/r.vb" --json
run fit_clustered fit --source "$OLD" --target "$NEWS" --method clustered -o "$W/c.vb"
run fit_unsup_json fit --source "$OLD" --target "$FULL" --pairs unsupervised --max-pairs 400 -o "$W/u.vb" --json
run fit_unsup_human fit --source "$OLD" --target "$FULL" --pairs unsupervised --max-pairs 300 --force -o "$W/u2.vb"
run fit_bad_param fit --source "$OLD" --target "$NEWS" --pairs unsupervised --param nope -o "$W/x.vb"
run fit_param_not_unsup fit --source "$OLD" --target "$NEWS" --param a=1 -o "$W/x.vb"
run fit_missing_output fit --source "$OLD" --target "$NEWS"
run fit_zero_batch fit --source "$OLD" --target "$NEWS" --batch-size 0 -o "$W/x.vb"
run fit_missing_store fit --source "file://$W/nope" --target "$NEWS" -o "$W/x.vb"
run fit_bad_pairs fit --source "$OLD" --target "$NEWS" --pairs nonsense -o "$W/x.vb"
run fit_bad_engine fit --source "$OLD" --target "$NEWS" --engine spark -o "$W/x.vb"
run fit_zero_workers fit --source "$OLD" --target "$NEWS" --workers 0 -o "$W/x.vb"
run info_coll_json info "$OLD" --json
run info_coll info "$OLD"
run info_align info "$W/a.vb"
run info_align_json info "$W/a.vb" --json
run info_missing info "file://$W/nope"
run info_bad_artifact info "$W/bad.json"
run link_geh link "$OLD" "$FULL" --seeds "$W/seeds.csv" --sample 600 -o "$W/links.npz"
run link_geh_json link "$OLD" "$FULL" --pairs "geh:$W/seeds.csv" --sample 600 -o "$W/links2.npz" --json
run link_reembed_json link "$OLD" --pairs reembed --model "$NEWM" --sample 300 -o "$W/links3.npz" --json
run link_reembed link "$OLD" --pairs reembed --model "$NEWM" --sample 300 -o "$W/links4.npz"
run link_ids_csv link "$OLD" "$NEWS" --pairs ids --sample 200 -o "$W/links5.csv" --json
run link_no_pairs link "$OLD" "$FULL" -o "$W/x.npz"
run link_bad_param link "$OLD" "$FULL" --pairs unsupervised --param =3 -o "$W/x.npz"
run fit_from_links fit --source "$OLD" --target "$NEWS" --pairs "file:$W/links3.npz" -o "$W/l.vb" --json

# ---- evaluate
run eval_json evaluate --alignment "$W/a.vb" --source "$OLD" --target "$FULL" --queries "file://$W/q_new" --json
run eval_human evaluate --alignment "$W/a.vb" --source "$OLD" --target "$FULL" --queries "file://$W/q_new"
run eval_all_pairs evaluate --alignment "$W/a.vb" --source "$OLD" --target "$NEWS" --all-pairs --max-pairs 300
run eval_fail_top1 evaluate --alignment "$W/a.vb" --source "$OLD" --target "$NEWS" --min-top1 1.01
run eval_fail_top1_json evaluate --alignment "$W/a.vb" --source "$OLD" --target "$NEWS" --min-top1 1.01 --json
run eval_fail_retention evaluate --alignment "$W/a.vb" --source "$OLD" --target "$FULL" \
    --queries "file://$W/q_new" --min-retention 0.999 --min-top1 1.01
run eval_retention_no_queries evaluate --alignment "$W/a.vb" --source "$OLD" --target "$NEWS" --min-retention 0.5
run eval_bad_artifact evaluate --alignment "$W/bad.json" --source "$OLD" --target "$NEWS"

# ---- report
run report_json report "$OLD" "$FULL" --pairs ids --sample 800 --queries "file://$W/q_new" \
    --old-queries "file://$W/q_old" --json
run report_human report "$OLD" "$FULL" --pairs ids --sample 800 --queries "file://$W/q_new" \
    --old-queries "file://$W/q_old" --html "$W/report.html"
cp "$W/report.html" "$OUT/report_html.html" 2>/dev/null
run report_fail_on report "$OLD" "$FULL" --sample 600 --target 1.1 --queries "file://$W/q_new" --fail-on caution
run report_reembed report "$OLD" --pairs reembed --model "$NEWM" --text-field text --sample 400 --json

# ---- migrate / verify
run migrate_dry migrate "$OLD" --alignment "$W/a.vb" --to "file://$W/new" --dry-run
run migrate_dry_json migrate "$OLD" --alignment "$W/a.vb" --to "file://$W/new" --dry-run --json
run migrate_json migrate "$OLD" --alignment "$W/a.vb" --to "file://$W/new" --json
run migrate_human migrate "$OLD" --alignment "$W/a.vb" --to "file://$W/new2"
run migrate_exists migrate "$OLD" --alignment "$W/a.vb" --to "file://$W/new"
run migrate_overwrite migrate "$OLD" --alignment "$W/a.vb" --to "file://$W/new" --overwrite --batch-size 400
run migrate_resume_nothing migrate "$OLD" --alignment "$W/a.vb" --to "file://$W/new" --resume
run migrate_nowhere migrate "$OLD" --alignment "$W/a.vb"
run migrate_into_source migrate "$OLD" --alignment "$W/a.vb" --to "$OLD"
run migrate_ray_field migrate "$OLD" --alignment "$W/a.vb" --field v2 --engine ray
run migrate_ray_dry migrate "$OLD" --alignment "$W/a.vb" --to "file://$W/x" --dry-run --engine ray
run migrate_field_file migrate "$OLD" --alignment "$W/a.vb" --field v2
run migrate_bad_artifact migrate "$OLD" --alignment "$W/bad.json" --to "file://$W/x"
run verify_json verify "$OLD" "file://$W/new" --alignment "$W/a.vb" --json
run verify_human verify "$OLD" "file://$W/new" --alignment "$W/a.vb" --sample 50
run verify_fail verify "$OLD" "$NEWS" --alignment "$W/a.vb"
run verify_fail_json verify "$OLD" "$NEWS" --alignment "$W/a.vb" --json

# ---- search
run search_json search --wrap "$OLD=$W/a.vb" --native "file://$W/b_part" --vectors "$W/q_new.npy" -k 3 --json
run search_human search --wrap "$OLD=$W/a.vb" --native "file://$W/b_part" --vectors "$W/q_new.npy" -k 3
run search_fused search --wrap "$OLD=$W/a.vb" --vectors "$W/q_new.npy" --old-vectors "$W/q_old.npy" --beta 0.5 \
    --hub-log "$W/hub.npy" -k 3 --json
run search_rerank search --wrap "$OLD=$W/a.vb" --vectors "$W/q_new.npy" --rerank-model "$NEWM" -k 3
run search_bad_wrap search --wrap "nothing" --vectors "$W/q_new.npy"
run search_bad_wrap2 search --wrap "=x.vb" --vectors "$W/q_new.npy"
run search_old_no_wrap search --native "file://$W/b_part" --vectors "$W/q_new.npy" --old-vectors "$W/q_old.npy"
run search_bad_npy search --native "file://$W/b_part" --vectors "$W/bad.json"
run search_missing_npy search --native "file://$W/b_part" --vectors "$W/none.npy"

# ---- merge
run merge_json merge "$OLD" "file://$W/b_part" --into "file://$W/merged" --alignment "$W/a.vb" --json
run merge_human merge "$OLD" "file://$W/b_part" --into "file://$W/merged2" --alignment "$W/a.vb" --policy keep-a
run merge_exists merge "$OLD" "file://$W/b_part" --into "file://$W/merged" --alignment "$W/a.vb"
run merge_keep_both merge "$OLD" "file://$W/b_part" --into "file://$W/merged3" --alignment "$W/a.vb" \
    --policy keep-both
run merge_into_input merge "$OLD" "file://$W/b_part" --into "$OLD" --alignment "$W/a.vb"

# ---- drift
run drift_run_json drift run "$W/drift.toml" --json
run drift_run drift run "$W/drift.toml"
run drift_watch drift watch "$W/drift.toml" --every 1s --max-runs 2
run drift_watch_json drift watch "$W/drift.toml" --every 1s --max-runs 1 --json
run drift_history drift history "$W/drift.toml" --plot "$W/drift.html"
run drift_history_json drift history "$W/drift.toml" --json
cp "$W/drift.html" "$OUT/drift_html.html" 2>/dev/null
run drift_bad_config drift run "$W/bad_drift.toml"
run drift_bad_every drift watch "$W/drift.toml" --every soon
run drift_missing drift run "$W/none.toml"

# ---- upgrade, stage by stage
run up_plan upgrade plan "$OLD" --to-model "$NEWM" --sample 16 --queries "file://$W/q_new" \
    --old-queries "file://$W/q_old" --pool 400 --fit-sample 300
run up_plan_json upgrade plan "$OLD" --to-model "$NEWM" --sample 16 --json
run up_start_neither upgrade start "$OLD" --to-model "$NEWM"
run up_start upgrade start "$OLD" --to-model "$NEWM" --to "file://$W/up_new" --fit-sample 300 --state "$W/up.sqlite"
run up_start_again upgrade start "$OLD" --to-model "$NEWM" --to "file://$W/up_new" --state "$W/up.sqlite"
run up_status upgrade status --state "$W/up.sqlite"
run up_status_json upgrade status --state "$W/up.sqlite" --json
run up_status_half upgrade status --state "$W/up.sqlite" --queries "file://$W/q_new"
run up_query_log upgrade query-log --state "$W/up.sqlite" --queries "file://$W/q_new" -k 5
run up_query_log_json upgrade query-log --state "$W/up.sqlite" --queries "file://$W/q_new" --json
run up_tune upgrade tune --state "$W/up.sqlite" --queries "file://$W/q_new" --old-queries "file://$W/q_old"
run up_tune_json upgrade tune --state "$W/up.sqlite" --queries "file://$W/q_new" --old-queries "file://$W/q_old" --json
run up_search upgrade search --state "$W/up.sqlite" "a word" -k 3
run up_search_known upgrade search --state "$W/up.sqlite" -k 3 --old-model "$OLDM" \
    "$(python -c 'from vecbridge.sample import load_wordnet_sample as l; s=l(); print(s.items[1000]["query"])')"
run up_search_json upgrade search --state "$W/up.sqlite" -k 2 --json \
    "$(python -c 'from vecbridge.sample import load_wordnet_sample as l; s=l(); print(s.items[1001]["query"])')"
run up_reembed upgrade reembed --state "$W/up.sqlite" --limit 200 --batch-size 50 --priority residual
run up_reembed_json upgrade reembed --state "$W/up.sqlite" --limit 100 --price-per-1k 0.5 --json
run up_reembed_cap upgrade reembed --state "$W/up.sqlite" --price-per-1k 0.5 --spend-cap 0.01
run up_reembed_until upgrade reembed --state "$W/up.sqlite" --until 0.6
run up_measure_json upgrade status --state "$W/up.sqlite" --queries "file://$W/q_new" --old-queries "file://$W/q_old" \
    --json
run up_cutover upgrade cutover --state "$W/up.sqlite"
run up_rollback_json upgrade rollback --state "$W/up.sqlite" --json
run up_finalize_early upgrade finalize --state "$W/up.sqlite"
run up_reembed_rest upgrade reembed --state "$W/up.sqlite" --json
run up_cutover_json upgrade cutover --state "$W/up.sqlite" --json
run up_drop_no_tty upgrade finalize --state "$W/up.sqlite" --drop-old
run up_finalize upgrade finalize --state "$W/up.sqlite"
run up_status_final upgrade status --state "$W/up.sqlite"
run up_missing_state upgrade status --state "$W/none.sqlite"
run up_bad_state upgrade status --state "$W/bad.sqlite"
run up_no_state upgrade reembed

# ---- mask what differs between two runs of the same build
python - "$OUT" <<'EOF'
import json
import pathlib
import re
import sys

RULES = [
    (re.compile(r'("(?:[a-z_]*seconds[a-z_]*|[a-z_]*_s|[a-z_]*latency[a-z_]*|elapsed|at|started|updated)": )'
                r'("[^"]*"|[-0-9.e+]+)'), r'\1"MASKED"'),
    (re.compile(r"\d[\d,]*(\.\d+)? (s|ms|h)\b"), "N \\2"),
    (re.compile(r"\d[\d,]*(\.\d+)? (vectors|records|texts)/s"), "N \\2/s"),
    (re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d(:\d\d(\.\d+)?)?([+-]\d\d:\d\d|Z)?"), "TIMESTAMP"),
    (re.compile(r"\d+(\.\d+)? ms per text"), "N ms per text"),
]


def _timed_lists_sorted(doc):
    """Lists of entries with a measured time (the report's options) come ranked by it: compare them as sets."""
    if isinstance(doc, dict):
        return {k: _timed_lists_sorted(v) for k, v in doc.items()}
    if isinstance(doc, list):
        items = [_timed_lists_sorted(v) for v in doc]
        if items and all(isinstance(v, dict) and "MASKED" in v.values() for v in items):
            items.sort(key=lambda v: json.dumps(v, sort_keys=True))
        return items
    return doc


#: a drift check samples afresh each run: its figures differ, its layout and wording do not
NUMBER = re.compile(r"-?\d+(\.\d+)?(e[-+]?\d+)?")
for p in sorted(pathlib.Path(sys.argv[1]).iterdir()):
    text = p.read_text(errors="replace")
    for rx, rep in RULES:
        text = rx.sub(rep, text)
    if p.name.startswith("drift_") and not p.name.endswith(".rc"):
        text = re.sub(r"<svg.*?</svg>", "<svg/>", text, flags=re.S)   # its axes follow the figures
        text = re.sub(r"[ ─]+", " ", NUMBER.sub("N", text))   # and so do the table's column widths
    if p.suffix == ".out" and text.startswith(("{", "[")):
        try:
            text = json.dumps(_timed_lists_sorted(json.loads(text)), indent=2) + "\n"
        except ValueError:
            pass
    p.write_text(text)
EOF
sort -rn "$W/timings.txt" | head -5 >&2
echo "snapshot of $(ls "$OUT" | wc -l) files in $OUT (from $REPO)"
