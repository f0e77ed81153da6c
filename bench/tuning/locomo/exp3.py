from base import *
from sklearn.linear_model import LogisticRegression
from sklearn.ensemble import HistGradientBoostingClassifier
E_w3=np.fromfile(D+'win3.f32',dtype='<f4').reshape(len(T),384)
def ranked(c): return [i for i,_ in sorted(c.items(), key=lambda x:(-x[1],x[0]))]
sess_of=lambda i:(T[i]['conv'],T[i]['session'])
def feats(qi,q,K=50):
    c=baseline_scores(qi,q)
    r=ranked(c)[:K]
    pool=conv_idx[q['conv']]
    kw=bm25(q['q']); hi=max(kw.values(),default=1) or 1
    cc=dict(zip(pool,E_ctx[pool]@EQ[qi])); ca=dict(zip(pool,E_al[pool]@EQ[qi])); cw=dict(zip(pool,E_w3[pool]@EQ[qi]))
    smax=defaultdict(float)
    for i,s in c.items(): smax[sess_of(i)]=max(smax[sess_of(i)],s)
    nm=named(q['q'])
    X=[]
    for rank,i in enumerate(r):
        nb=max([c.get(j,0) for j in (i-1,i+1) if 0<=j<N and sess_of(j)==sess_of(i)],default=0)
        spk=tuple(words(T[i]['speaker']))
        X.append([c[i],kw.get(i,0)/hi,cc[i],ca[i],cw[i],nb,smax[sess_of(i)],rank,math.log1p(len(T[i]['text'])),
                  1.0 if nm and spk in nm else 0.0, 1.0 if nm and spk not in nm else 0.0,
                  1.0 if 'shares a photo' in T[i]['text'] else 0.0, q['cat'] if False else 0])
    return r,np.array(X)
def build(sel):
    Xs=[];ys=[];groups=[]
    for qi,q in enumerate(Q):
        if not sel(q) or not q['ev']: continue
        r,X=feats(qi,q); ev=set(q['ev'])
        Xs.append(X); ys+= [1 if dia_of[i] in ev else 0 for i in r]; groups.append((qi,r,X))
    return np.vstack(Xs),np.array(ys),groups
Xtr,ytr,_=build(TRAIN)
_,_,gte=build(TEST)
_,_,gtr=build(TRAIN)
for name,m in [('lr',LogisticRegression(C=1.0,max_iter=2000)),('gb',HistGradientBoostingClassifier(max_iter=200,learning_rate=0.05,max_depth=3))]:
    m.fit(Xtr,ytr)
    for lab,G in (('tr',gtr),('te',gte)):
        memo={qi:(r,X) for qi,r,X in G}
        def f(qi,q):
            r,X=memo[qi]; p=m.predict_proba(X)[:,1]
            return [r[j] for j in np.argsort(-p,kind='stable')][:10]
        report(f,TRAIN if lab=='tr' else TEST,name+' '+lab)
report(baseline,TEST,'base te')
