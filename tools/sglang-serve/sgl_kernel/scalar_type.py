"""The quantized number formats SGLang's quantization code names (sglang-fleet's stand-in, written from
their definition: sign, exponent and mantissa bits, an integer bias, and for floats whether infinities and
NaN exist). SGLang's quantization/utils.py reads `scalar_types.uint4b8` and the like at import; the CPU
path never quantizes, so only the descriptions are needed, no kernel."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ScalarType:
    exponent: int  # bits; 0 for an integer type
    mantissa: int  # bits, the sign bit not counted
    signed: bool
    bias: int  # what is subtracted from a stored integer to get its value (uint4b8: stored - 8)
    finite_values_only: bool = False  # a float type without infinities
    nan_repr: int = 1  # 0: no NaN; 1: IEEE 754's; 2: the all-ones pattern (extended-range fp8)

    @property
    def size_bits(self) -> int:
        return self.exponent + self.mantissa + int(self.signed)

    def is_floating_point(self) -> bool:
        return self.exponent != 0

    def is_integer(self) -> bool:
        return self.exponent == 0

    def has_bias(self) -> bool:
        return self.bias != 0

    @property
    def id(self) -> int:
        """One integer per type, its fields packed (what a kernel call would take)."""
        value = 0
        for field, bits in ((self.exponent, 8), (self.mantissa, 8), (int(self.signed), 1), (self.bias, 32),
                            (int(self.finite_values_only), 1), (self.nan_repr, 8)):
            value = (value << bits) | (field & ((1 << bits) - 1))
        return value

    @classmethod
    def int_(cls, size_bits: int, bias: int | None = None) -> ScalarType:
        return cls(0, size_bits - 1, True, bias or 0)

    @classmethod
    def uint(cls, size_bits: int, bias: int | None = None) -> ScalarType:
        return cls(0, size_bits, False, bias or 0)

    @classmethod
    def float_IEEE754(cls, exponent: int, mantissa: int) -> ScalarType:
        return cls(exponent, mantissa, True, 0)

    @classmethod
    def float_(cls, exponent: int, mantissa: int, finite_values_only: bool, nan_repr: int) -> ScalarType:
        return cls(exponent, mantissa, True, 0, finite_values_only, nan_repr)

    def __str__(self) -> str:
        if self.is_floating_point():
            return (f"float{self.size_bits}_e{self.exponent}m{self.mantissa}"
                    + ("f" if self.finite_values_only else "") + ("n" if self.nan_repr == 2 else ""))
        return ("int" if self.signed else "uint") + f"{self.size_bits}" + (f"b{self.bias}" if self.bias else "")


class scalar_types:
    int4 = ScalarType.int_(4)
    uint4 = ScalarType.uint(4)
    int8 = ScalarType.int_(8)
    uint8 = ScalarType.uint(8)
    float8_e4m3fn = ScalarType.float_(4, 3, True, 2)
    float8_e5m2 = ScalarType.float_IEEE754(5, 2)
    float16_e8m7 = ScalarType.float_IEEE754(8, 7)
    float16_e5m10 = ScalarType.float_IEEE754(5, 10)
    float6_e3m2f = ScalarType.float_(3, 2, True, 0)
    float4_e2m1f = ScalarType.float_(2, 1, True, 0)
    uint2b2 = ScalarType.uint(2, 2)
    uint3b4 = ScalarType.uint(3, 4)
    uint4b8 = ScalarType.uint(4, 8)
    uint8b128 = ScalarType.uint(8, 128)
    bfloat16 = float16_e8m7
    float16 = float16_e5m10
