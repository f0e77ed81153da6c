import json, re, math, numpy as np, snowballstemmer
from collections import defaultdict, Counter
import os
D=os.environ.get('LOCOMO_DUMP', '/tmp/lcdump').rstrip('/')+'/'
meta=json.load(open(D+'meta.json'))
T=meta['turns']; Q=meta['questions']; CT=meta['ctx_texts']
E_ctx=np.fromfile(D+'turns_ctx.f32',dtype='<f4').reshape(len(T),384)
E_al=np.fromfile(D+'turns_alone.f32',dtype='<f4').reshape(len(T),384)
EQ=np.fromfile(D+'questions.f32',dtype='<f4').reshape(len(Q),384)
STOP=set("a an and are as at be but by for if in into is it of on or such that the their then there these they this to was will with what which who when where how did do does i you me my your we our he she his her".split())
st=snowballstemmer.stemmer('english')
def words(t): return [w.lower() for w in re.split(r'[^0-9A-Za-z\u00C0-\uFFFF]+',t) if w]
def terms(t): return [st.stemWord(w) for w in words(t) if w not in STOP]
convs=sorted(set(t['conv'] for t in T), key=lambda c:[t['conv'] for t in T].index(c))
conv_idx={c:[i for i,t in enumerate(T) if t['conv']==c] for c in convs}
dia_of=[t['dia'] for t in T]
# global BM25 stats (index is global across conversations, like the Rust index)
toks=[terms(x) for x in CT]
lens=np.array([len(x) for x in toks],dtype=np.float32); avg=lens.mean()
post=defaultdict(list)
for i,ts in enumerate(toks):
    for w,f in Counter(ts).items(): post[w].append((i,f))
N=len(T)
def bm25(q):
    out=defaultdict(float); seen=set()
    for w in terms(q):
        if w in seen: continue
        seen.add(w)
        p=post.get(w)
        if not p: continue
        df=len(p); idf=math.log(1+(N-df+0.5)/(df+0.5))
        for i,f in p:
            out[i]+=idf*f*2.2/(f+1.2*(0.25+0.75*lens[i]/avg))
    return out
speakers={}
for t in T: speakers.setdefault(tuple(words(t['speaker'])),None)
def named(q):
    qs=set(words(q)); return {s for s in speakers if s and (all(w in qs for w in s) or s[0] in qs)}
def recall(ret,ev,k=10):
    g=set(ev); return len(g & set(ret[:k]))/len(g) if g else None
CATS={1:'multi',2:'temporal',3:'open',4:'single',5:'adv'}
def report(fn, qsel=None, label=''):
    per=defaultdict(list)
    for qi,q in enumerate(Q):
        if qsel and not qsel(q): continue
        if not q['ev']: continue
        ret=fn(qi,q)
        per[q['cat']].append(recall([dia_of[i] for i in ret],q['ev']))
    allr=[x for c in (1,2,3,4) for x in per[c]]
    s=f"{label:14s} overall {np.mean(allr):.4f} "+' '.join(f"{CATS[c]} {np.mean(per[c]):.3f}" for c in sorted(per))
    print(s); return np.mean(allr)
def baseline_scores(qi,q,alpha=0.5,sw=0.3,E=E_ctx):
    pool=conv_idx[q['conv']]
    kw=bm25(q['q']); kw={i:s for i,s in kw.items()}
    hi=max(kw.values(),default=0)
    kw={i:(s/hi if hi>0 else 0) for i,s in kw.items()}
    cos=E[pool]@EQ[qi]
    order=np.argsort(-cos)[:200]
    c=defaultdict(float)
    for i,s in kw.items():
        if T[i]['conv']==q['conv']: c[i]+=(1-alpha)*s
    for j in order: c[pool[j]]+=alpha*max(cos[j],0)
    nm=named(q['q'])
    if nm and sw>0:
        for i in c:
            if tuple(words(T[i]['speaker'])) not in nm: c[i]*=1-sw
    return c
def baseline(qi,q,**kw):
    c=baseline_scores(qi,q,**kw)
    return [i for i,_ in sorted(c.items(), key=lambda x:(-x[1],x[0]))][:10]
TRAIN=lambda q:q['conv'] in convs[:2]
TEST=lambda q:q['conv'] in convs[2:]
if __name__=='__main__':
    report(baseline,TRAIN,'base train'); report(baseline,TEST,'base test'); report(baseline,None,'base all')
