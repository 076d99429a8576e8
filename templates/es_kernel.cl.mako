## Shared helper: the exponential-of-semicircle (ES) kernel of ducc0's
## wgridder, phi(s) = exp(beta (sqrt(1 - (2 s / W)^2) - 1)) for |s| < W / 2.
## Parameters: real ("float" | "double"), support (int W), beta (float).
## (native_exp on the Intel runtime cost 3e-4 at epsilon 1e-5: plain exp.)
<%
    half = support / 2.0
%>
#define SUPPORT ${support}
#define HALF_SUPPORT ((${real})${repr(half)})
#define INV_HALF_SUPPORT ((${real})${repr(1.0 / half)})
#define ES_BETA ((${real})${repr(float(beta))})

// phi at offset s (grid cells from the point); zero outside the support.
inline ${real} es_kernel(const ${real} s)
{
    const ${real} z = s * INV_HALF_SUPPORT;
    const ${real} z2 = z * z;
    return z2 < (${real})1 ? exp(ES_BETA * (sqrt((${real})1 - z2) - (${real})1))
                           : (${real})0;
}
