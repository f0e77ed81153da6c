from base import *
import exp5
from exp5 import cache, NAMES, TRAIN, TEST
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler
from sklearn.pipeline import make_pipeline
sess_of=lambda i:(T[i]['conv'],T[i]['session'])
extra={}
for qi,(r,X) in cache.items():
    q=Q[qi]; c=baseline_scores(qi,q)
    top=r[:50]; cnt=Counter(sess_of(i) for i in top)
    sess_scores=defaultdict(list)
    for i,sc in c.items(): sess_scores[sess_of(i)].append(sc)
    m3={k:np.mean(sorted(v,reverse=True)[:3]) for k,v in sess_scores.items()}
    best=c[r[0]]
    rows=[]
    for i in r:
        nb2=max([c.get(j,0) for j in (i-2,i+2) if 0<=j<N and sess_of(j)==sess_of(i)],default=0)
        rows.append([cnt[sess_of(i)], m3[sess_of(i)], nb2, c[i]/best if best>0 else 0])
    extra[qi]=np.array(rows)
base_cols=[NAMES.index(n) for n in ['base','kw','cos_ctx','nb','smax','rank','len','spk_named','spk_other','time']]
def run(use,label):
    def F(qi):
        r,X=cache[qi]; return np.column_stack([X[:,base_cols]]+([extra[qi][:,use]] if use else []))
    Xs=[];ys=[]
    for qi,q in enumerate(Q):
        if not TRAIN(q) or qi not in cache: continue
        r,X=cache[qi]; ev=set(q['ev']); Xs.append(F(qi)); ys+=[1 if dia_of[i] in ev else 0 for i in r]
    m=make_pipeline(StandardScaler(),LogisticRegression(C=1.0,max_iter=5000)); m.fit(np.vstack(Xs),ys)
    def f(qi,q):
        r,X=cache[qi]; p=m.predict_proba(F(qi))[:,1]; return [r[j] for j in np.argsort(-p,kind='stable')][:10]
    report(f,TRAIN,label+' tr'); report(f,TEST,label+' te')
run([], 'set1')
for u,l in [([0],'+cnt'),([1],'+m3'),([2],'+nb2'),([3],'+rel'),([0,1,2,3],'+all')]: run(u,l)
