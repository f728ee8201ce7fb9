"""One line per finding of a goldens check --results file that is not a match: engine, model, case,
status, and the detail's first line (server address scrubbed)."""
import json
import re
import sys

d = json.load(open(sys.argv[1]))
print(d['counts'])
for g in d['groups']:
    for o in g['outcomes']:
        if o['status'] in ('match', 'both-refuse'):
            continue
        det = re.sub(r'http://127\.0\.0\.1:\d+', 'URL', (o['detail'] or '').split('\n')[0])
        model, case = o['case'].split('/', 1)
        print(' | '.join((o['engine'], model, case, o['status'], det[:200])))
