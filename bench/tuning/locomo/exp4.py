from base import *
# linear adapter on the query embedding, trained on TRAIN questions
rng=np.random.default_rng(0)
def train_adapter(sel,lam=1.0,lr=0.5,epochs=200,temp=0.05,E=E_ctx):
    data=[]
    for qi,q in enumerate(Q):
        if not sel(q) or not q['ev'] or q['cat']==5: continue
        pool=conv_idx[q['conv']]; ev=set(q['ev'])
        pos=[j for j,i in enumerate(pool) if dia_of[i] in ev]
        if pos: data.append((qi,np.array(pool),pos))
    d=384; W=np.eye(d,dtype=np.float64)
    for ep in range(epochs):
        G=np.zeros((d,d)); L=0
        for qi,pool,pos in data:
            q=EQ[qi].astype(np.float64); Ep=E[pool].astype(np.float64)
            z=Ep@(W@q)/temp; z-=z.max(); p=np.exp(z); p/=p.sum()
            tgt=np.zeros(len(pool)); tgt[pos]=1/len(pos)
            L+=-np.sum(tgt*np.log(p+1e-12))
            g=(p-tgt)/temp  # dL/dz
            G+=np.outer(Ep.T@g,q)
        G/=len(data); G+=lam*(W-np.eye(d))
        W-=lr*G
        if ep%50==0: print(ep,L/len(data))
    return W
import sys
lam=float(sys.argv[1]) if len(sys.argv)>1 else 1.0
W=train_adapter(TRAIN,lam=lam)
EQ0=EQ.copy()
EQa=(EQ0@W.T).astype(np.float32); EQa/=np.linalg.norm(EQa,axis=1,keepdims=True)
import base
base.EQ[:]=EQa
report(baseline,TRAIN,f'adapt{lam} tr'); report(baseline,TEST,f'adapt{lam} te')
