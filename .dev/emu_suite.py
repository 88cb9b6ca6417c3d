"""Dev runner (device): the GPU suite under KSCUPY_EMULATE_ARCH=CC in parts across device
calls. Runs the tests that no log of this commit under STATE/ holds yet, until DEADLINE
(epoch seconds); prints the totals over all parts. Usage: emu_suite.py CC DEADLINE STATE"""
import json, os, pathlib, re, signal, subprocess, sys, time

cc, deadline, state = sys.argv[1], float(sys.argv[2]), pathlib.Path(sys.argv[3])
state.mkdir(parents=True, exist_ok=True)
env = dict(os.environ, KSCUPY_CACHE_DIR=f"{os.getcwd()}/.cache/ks{cc}")
if cc != "native":
    env["KSCUPY_EMULATE_ARCH"] = cc
base = [sys.executable, "-m", "pytest", "-m", "gpu", "-p", "no:cacheprovider"]
OUTCOME = re.compile(r"\b(PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS) (tests/\S+)")


def outcomes():
    seen = {}
    for log in sorted(state.glob(f"sm{cc}_part*.log")):
        for line in log.read_text(errors="replace").splitlines():
            m = OUTCOME.search(line)
            if m:
                seen[m.group(2)] = m.group(1)
    return seen


listed = state / f"sm{cc}_ids.txt"
if not listed.exists():
    out = subprocess.run(base + ["--collect-only", "-q", "tests"], env=env, capture_output=True,
                         text=True).stdout
    listed.write_text("\n".join(l.strip() for l in out.splitlines() if "::" in l) + "\n")
ids = listed.read_text().splitlines()
seen = outcomes()
rest = [i for i in ids if i not in seen]
part = len(list(state.glob(f"sm{cc}_part*.log")))
left = deadline - time.time()
if rest and left > 60:
    print(f"sm_{cc}: {len(rest)} of {len(ids)} tests to run, {left:.0f} s left", flush=True)
    args = ["tests"] if len(rest) == len(ids) else rest
    with open(state / f"sm{cc}_part{part}.log", "w") as log:
        proc = subprocess.Popen(base + ["-v", "-n", "15", "--dist", "worksteal", "-rfE"] + args,
                                env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            proc.wait(timeout=left - 25)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill(); proc.wait()
    seen = outcomes()
    rest = [i for i in ids if i not in seen]
counts = {}
for v in seen.values():
    counts[v] = counts.get(v, 0) + 1
failed = sorted(k for k, v in seen.items() if v in ("FAILED", "ERROR"))
summary = {"cc": cc, "collected": len(ids), "counts": counts, "not_run": len(rest),
           "failed": failed, "complete": not rest}
(state / f"sm{cc}_summary.json").write_text(json.dumps(summary, indent=1))
print(json.dumps(summary), flush=True)
