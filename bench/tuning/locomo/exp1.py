from base import *
import itertools
def ranked(c): return [i for i,_ in sorted(c.items(), key=lambda x:(-x[1],x[0]))]
# upper bounds
for K in (10,20,30,50,100):
    def f(qi,q,K=K):
        r=ranked(baseline_scores(qi,q)); return r[:K]
    per=[]
    for qi,q in enumerate(Q):
        if q['cat']==5 or not q['ev']: continue
        per.append(recall([dia_of[i] for i in f(qi,q)],q['ev'],K))
    print('recall@',K,np.mean(per))
# 1. max of ctx / alone cosine
E_max=None
def dual(qi,q,alpha=0.5,sw=0.3,mix='max'):
    c1=baseline_scores(qi,q,alpha=alpha,sw=0,E=E_ctx)
    c2=baseline_scores(qi,q,alpha=alpha,sw=0,E=E_al)
    c=defaultdict(float)
    for i in set(c1)|set(c2):
        a,b=c1.get(i,0),c2.get(i,0)
        c[i]=max(a,b) if mix=='max' else (a+b)/2
    nm=named(q['q'])
    if nm:
        for i in c:
            if tuple(words(T[i]['speaker'])) not in nm: c[i]*=1-sw
    return ranked(c)[:10]
for mix in ('max','mean'):
    report(lambda qi,q:dual(qi,q,mix=mix),TRAIN,'dual '+mix+' tr'); report(lambda qi,q:dual(qi,q,mix=mix),TEST,'dual '+mix+' te')
# 3. neighbour / session smoothing
pos={}
for c in convs:
    for i in conv_idx[c]: pos[i]=i
def smooth(qi,q,g=0.2,b=0.0):
    c=baseline_scores(qi,q)
    out={}
    sess_max=defaultdict(float)
    for i,s in c.items(): sess_max[(T[i]['conv'],T[i]['session'])]=max(sess_max[(T[i]['conv'],T[i]['session'])],s)
    for i,s in c.items():
        nb=max([c.get(j,0) for j in (i-1,i+1) if 0<=j<N and T[j]['conv']==T[i]['conv'] and T[j]['session']==T[i]['session']],default=0)
        out[i]=s+g*nb+b*sess_max[(T[i]['conv'],T[i]['session'])]
    return ranked(out)[:10]
for g,b in [(0.1,0),(0.2,0),(0,0.1),(0,0.2),(0.1,0.1)]:
    report(lambda qi,q:smooth(qi,q,g,b),TRAIN,f'sm g{g} b{b} tr')
