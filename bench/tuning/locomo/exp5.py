from base import *
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler
from sklearn.pipeline import make_pipeline
E_w3=np.fromfile(D+'win3.f32',dtype='<f4').reshape(len(T),384)
def ranked(c): return [i for i,_ in sorted(c.items(), key=lambda x:(-x[1],x[0]))]
sess_of=lambda i:(T[i]['conv'],T[i]['session'])
TIME=re.compile(r"\b(yesterday|today|tomorrow|last|next|ago|week|weekend|month|year|monday|tuesday|wednesday|thursday|friday|saturday|sunday|morning|night|since|recently|just)\b",re.I)
NAMES=['base','kw','cos_ctx','cos_alone','cos_w3','nb','smax','rank','len','spk_named','spk_other','photo','when_x_time','time','firstperson','qlen']
def feats(qi,q,K=50):
    c=baseline_scores(qi,q)
    r=ranked(c)[:K]
    pool=conv_idx[q['conv']]
    kw=bm25(q['q']); hi=max(kw.values(),default=1) or 1
    cc=dict(zip(pool,E_ctx[pool]@EQ[qi])); ca=dict(zip(pool,E_al[pool]@EQ[qi])); cw=dict(zip(pool,E_w3[pool]@EQ[qi]))
    smax=defaultdict(float)
    for i,s in c.items(): smax[sess_of(i)]=max(smax[sess_of(i)],s)
    nm=named(q['q']); when=q['q'].lower().startswith('when')
    X=[]
    for rank,i in enumerate(r):
        nb=max([c.get(j,0) for j in (i-1,i+1) if 0<=j<N and sess_of(j)==sess_of(i)],default=0)
        spk=tuple(words(T[i]['speaker'])); tm=1.0 if TIME.search(T[i]['text']) else 0.0
        fp=1.0 if re.search(r"\b(I|I'm|I've|my|we|our)\b",T[i]['text']) else 0.0
        X.append([c[i],kw.get(i,0)/hi,cc[i],ca[i],cw[i],nb,smax[sess_of(i)],math.log1p(rank),math.log1p(len(T[i]['text'])),
                  1.0 if nm and spk in nm else 0.0, 1.0 if nm and spk not in nm else 0.0,
                  1.0 if 'shares a photo' in T[i]['text'] else 0.0, tm*when, tm, fp, math.log1p(len(q['q']))])
    return r,np.array(X)
cache={}
for qi,q in enumerate(Q):
    if q['ev']: cache[qi]=feats(qi,q)
def run(cols,label,C=1.0,show=False):
    Xs=[];ys=[]
    for qi,q in enumerate(Q):
        if not TRAIN(q) or qi not in cache: continue
        r,X=cache[qi]; ev=set(q['ev']); Xs.append(X[:,cols]); ys+=[1 if dia_of[i] in ev else 0 for i in r]
    m=make_pipeline(StandardScaler(),LogisticRegression(C=C,max_iter=5000)); m.fit(np.vstack(Xs),ys)
    if show: print(dict(zip([NAMES[c] for c in cols],np.round(m[-1].coef_[0],2))))
    def f(qi,q):
        r,X=cache[qi]; p=m.predict_proba(X[:,cols])[:,1]
        return [r[j] for j in np.argsort(-p,kind='stable')][:10]
    report(f,TRAIN,label+' tr'); return report(f,TEST,label+' te')
allc=list(range(len(NAMES)))
#run(allc,'all',show=True)
run([c for c in allc if NAMES[c]!='cos_w3'],'no w3')
for drop in []: # in ['nb','smax','spk_named','spk_other','photo','when_x_time','time','firstperson','len','rank','qlen']:
    run([c for c in allc if NAMES[c] not in (drop,'cos_w3')],'-'+drop)
print('----')
base_set=['base','kw','cos_ctx','cos_alone','nb','smax','rank','len','spk_named','spk_other','time']
run([NAMES.index(n) for n in base_set],'set1',show=True)
run([NAMES.index(n) for n in base_set if n!='cos_alone'],'set1-alone',show=True)
run([NAMES.index(n) for n in base_set if n not in ('cos_alone','time')],'set1-alone-time')
for C in (0.1,10): run([NAMES.index(n) for n in base_set if n!='cos_alone'],f'set1-alone C{C}',C=C)
