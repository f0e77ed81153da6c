from base import *
import exp5
from exp5 import cache, NAMES, TRAIN, TEST
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler
from sklearn.pipeline import make_pipeline
# own-text BM25 using the main index's idf/avg length on own tokens
own_toks=[terms(t['speaker']+': '+t['text']) for t in T]
own_avg=np.mean([len(x) for x in own_toks])
def own_bm25(q,i):
    s=0.0; tf=Counter(own_toks[i]); dl=len(own_toks[i])
    for w in set(terms(q)):
        p=post.get(w)
        if not p or w not in tf: continue
        df=len(p); idf=math.log(1+(N-df+0.5)/(df+0.5)); f=tf[w]
        s+=idf*f*2.2/(f+1.2*(0.25+0.75*dl/own_avg))
    return s
extra={}
for qi,(r,X) in cache.items():
    q=Q[qi]; kw=bm25(q['q']); hi=max(kw.values(),default=1) or 1
    ob=np.array([own_bm25(q['q'],i) for i in r]); 
    extra[qi]=np.column_stack([ob/hi, (ob>0).astype(float)])
base_cols=[NAMES.index(n) for n in ['base','kw','cos_ctx','nb','smax','rank','len','spk_named','spk_other','time']]
def run(use,label):
    Xs=[];ys=[]
    for qi,q in enumerate(Q):
        if not TRAIN(q) or qi not in cache: continue
        r,X=cache[qi]; ev=set(q['ev']); F=np.column_stack([X[:,base_cols]]+[extra[qi][:,use]] if use else [X[:,base_cols]])
        Xs.append(F); ys+=[1 if dia_of[i] in ev else 0 for i in r]
    m=make_pipeline(StandardScaler(),LogisticRegression(C=1.0,max_iter=5000)); m.fit(np.vstack(Xs),ys)
    def f(qi,q):
        r,X=cache[qi]; F=np.column_stack([X[:,base_cols]]+[extra[qi][:,use]] if use else [X[:,base_cols]])
        p=m.predict_proba(F)[:,1]; return [r[j] for j in np.argsort(-p,kind='stable')][:10]
    report(f,TRAIN,label+' tr'); report(f,TEST,label+' te')
run([], 'set1')
run([0], '+own')
run([0,1], '+own+any')
