#!/usr/bin/env python3
"""Which parent each message gets, against a generator trace's ground truth.

For every message of the truth (truth.jsonl written by `causeway generate`) not sent by a
client, the parent it has in the most likely instance that holds it in an `analyze --emit
instances --format jsonl` output (by the trace's data row), and the share right per sender and
kind (`reply`: to a client; `call`: anything else). With a third argument NODE, what NODE's
calls got instead: right, none (a root), or a wrong parent by its sender and the true one's.

    tools/parents.py target/bench-data/accuracy-multi-tier@45-100000/truth.jsonl out.jsonl ws1

Not part of the product or its tests.
"""
import json,sys,collections
if len(sys.argv) not in (3, 4):
    sys.exit(__doc__)
truth,out=sys.argv[1],sys.argv[2]
tp={}; src={}; dst={}
for l in open(truth):
    o=json.loads(l)
    if o.get('kind')!='instance': continue
    ms=o['messages']
    for m in ms:
        p=m['parent']; tp[m['row']]=None if p is None else ms[p]['row']; src[m['row']]=m['src']; dst[m['row']]=m['dst']
best={}
for l in open(out):
    o=json.loads(l)
    if o.get('kind')!='instance': continue
    ms=o['messages']; pr=o['probability']
    for m in ms:
        r=m.get('row'); p=m['parent']; pr_=None if p is None else ms[p].get('row')
        if r not in best or best[r][0]<pr: best[r]=(pr,pr_)
ok=collections.Counter(); n=collections.Counter()
for r,p in tp.items():
    if src[r]=='CLIENT': continue
    k=(src[r], 'reply' if dst[r]=='CLIENT' else 'call')
    n[k]+=1
    if r in best and best[r][1]==p: ok[k]+=1
for k in sorted(n): print(k, n[k], f"{ok[k]/n[k]:.1%}")
node=sys.argv[3] if len(sys.argv)>3 else None
if node:
    c=collections.Counter()
    for r,p in tp.items():
        if src[r]!=node or dst[r]=='CLIENT': continue
        if r not in best: c['missing']+=1; continue
        g=best[r][1]
        if g==p: c['right']+=1
        elif g is None: c['none']+=1
        else: c[('wrong', src[g] if g in src else '?', 'true', src.get(p))]+=1
    print(c.most_common())
