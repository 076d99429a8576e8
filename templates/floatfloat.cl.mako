## Float-float ("double-single") arithmetic for devices without fp64: a value
## is the unevaluated sum hi + lo of two floats (|lo| <= ulp(hi) / 2), about
## 44 bits of mantissa, from error-free transformations that rely on
## correctly rounded float operations and fma (never build with
## -cl-fast-relaxed-math or -cl-unsafe-math-optimizations).  Values come
## from the host split into (hi, lo) pairs: clgrid.core.table.float_float.
#ifndef CLGRID_FLOATFLOAT_CL
#define CLGRID_FLOATFLOAT_CL
typedef float2 ff_t;   // (hi, lo)

// a + b exactly, where |a| >= |b| or a == 0
inline ff_t ff_quick_two_sum(const float a, const float b)
{
    const float s = a + b;
    return (ff_t)(s, b - (s - a));
}

// a + b exactly (Knuth)
inline ff_t ff_two_sum(const float a, const float b)
{
    const float s = a + b;
    const float bb = s - a;
    return (ff_t)(s, (a - (s - bb)) + (b - bb));
}

inline ff_t ff_mul(const ff_t x, const ff_t y)
{
    const float p = x.x * y.x;
    const float e = fma(x.x, y.y, fma(x.y, y.x, fma(x.x, y.x, -p)));
    return ff_quick_two_sum(p, e);
}

inline ff_t ff_mul_f(const ff_t x, const float b)
{
    const float p = x.x * b;
    return ff_quick_two_sum(p, fma(x.y, b, fma(x.x, b, -p)));
}

inline ff_t ff_add_f(const ff_t x, const float b)
{
    const ff_t s = ff_two_sum(x.x, b);
    return ff_quick_two_sum(s.x, s.y + x.y);
}

// rint(hi + lo), as a float (exact below 2^24; x.x - rint(x.x) is exact)
inline float ff_rint(const ff_t x)
{
    const float r = rint(x.x);
    return r + rint((x.x - r) + x.y);
}
#endif
