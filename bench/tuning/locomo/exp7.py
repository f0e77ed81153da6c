from base import *
import exp5
from exp5 import cache, NAMES, TRAIN, TEST
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler
from sklearn.pipeline import make_pipeline
cols=[NAMES.index(n) for n in ['base','kw','cos_ctx','nb','smax','rank','len','spk_named','spk_other','time']]
Xs=[];ys=[]
for qi,q in enumerate(Q):
    if not TRAIN(q) or qi not in cache: continue
    r,X=cache[qi]; ev=set(q['ev']); Xs.append(X[:,cols]); ys+=[1 if dia_of[i] in ev else 0 for i in r]
m=make_pipeline(StandardScaler(),LogisticRegression(C=1.0,max_iter=5000)); m.fit(np.vstack(Xs),ys)
def mmr(qi,q,lam=0.3,dist=1):
    r,X=cache[qi]; p=m.predict_proba(X[:,cols])[:,1]
    order=list(np.argsort(-p,kind='stable')); sel=[]
    cand=list(order)
    while len(sel)<10 and cand:
        best=None;bs=-1e9
        for j in cand:
            i=r[j]; pen=sum(1 for s in sel if T[s]['conv']==T[i]['conv'] and T[s]['session']==T[i]['session'] and abs(s-i)<=dist)
            sc=p[j]-lam*pen*p[j]
            if sc>bs: bs=sc;best=j
        sel.append(r[best]); cand.remove(best)
    return sel
for lam in (0.0,0.2,0.4,0.6):
    for d in (1,2):
        report(lambda qi,q:mmr(qi,q,lam,d),TRAIN,f'mmr{lam} d{d} tr'); report(lambda qi,q:mmr(qi,q,lam,d),TEST,f'mmr{lam} d{d} te')
