import json, sys
d = json.load(open(sys.argv[1])); m = sys.argv[2] if len(sys.argv) > 2 else 'auto'
for k, v in d.get('summary', {}).items():
    print(k, v if not isinstance(v, dict) else {a: (round(b, 3) if isinstance(b, float) else b) for a, b in v.items()})
import statistics
rat = {}
for r in d['rows']:
    s = r['seconds']
    if m not in s: continue
    base = min(v for k, v in s.items() if k.startswith('base'))
    ratio = base / s[m]; rat.setdefault(r['layout'], []).append(ratio)
    if ratio < 0.95:
        print(r['dtype'], r['layout'], r['batch'], r.get('emulated_arch', r.get('sample')), r['pattern'], round(ratio, 3), r.get('auto_choice'),
              {k: round(v * 1e6, 1) for k, v in s.items()})
for l, v in rat.items(): print(m, l, len(v), 'median', round(statistics.median(v), 3), 'min', round(min(v), 3), 'below', sum(x < 0.95 for x in v))
