from base import *
E_w3=np.fromfile(D+'win3.f32',dtype='<f4').reshape(len(T),384)
def ranked(c): return [i for i,_ in sorted(c.items(), key=lambda x:(-x[1],x[0]))]
def fused(qi,q,wa=0.0,ww=0.0,sw=0.3):
    c=baseline_scores(qi,q,sw=0)
    pool=conv_idx[q['conv']]
    if ww or wa:
        cw=E_w3[pool]@EQ[qi]; ca=E_al[pool]@EQ[qi]
        for j,i in enumerate(pool):
            c[i]=c.get(i,0)+ww*max(cw[j],0)+wa*max(ca[j],0)
    nm=named(q['q'])
    if nm:
        for i in c:
            if tuple(words(T[i]['speaker'])) not in nm: c[i]*=1-sw
    return ranked(c)[:10]
for wa,ww in [(0,0.1),(0,0.2),(0,0.3),(0.2,0.2),(0.3,0.3)]:
    report(lambda qi,q:fused(qi,q,wa,ww),TRAIN,f'w a{wa} w{ww} tr')
