//! Bit-exact known vectors for every element and scale encoding.

use crate::quant::{e2m1, e4m3, e8m0};

#[test]
fn e2m1_all_sixteen_codes() {
    let want = [
        (0x0, 0.0f32),
        (0x1, 0.5),
        (0x2, 1.0),
        (0x3, 1.5),
        (0x4, 2.0),
        (0x5, 3.0),
        (0x6, 4.0),
        (0x7, 6.0),
        (0x8, -0.0),
        (0x9, -0.5),
        (0xa, -1.0),
        (0xb, -1.5),
        (0xc, -2.0),
        (0xd, -3.0),
        (0xe, -4.0),
        (0xf, -6.0),
    ];
    for (code, v) in want {
        let got = e2m1::decode(code);
        assert_eq!(got.to_bits(), v.to_bits(), "code {code:#x}");
        // Every value encodes back to its own code, −0 included.
        assert_eq!(e2m1::encode(v), code, "value {v}");
    }
    assert!(e2m1::decode(0x8).is_sign_negative());
}

#[test]
fn e2m1_rounds_to_nearest_even_and_saturates() {
    let cases = [
        (0.25f32, 0x0u8), // tie 0 | 0.5 → 0 (even)
        (0.26, 0x1),
        (0.75, 0x2), // tie 0.5 | 1.0 → 1.0
        (1.25, 0x2), // tie 1.0 | 1.5 → 1.0
        (1.75, 0x4), // tie 1.5 | 2.0 → 2.0
        (2.5, 0x4),  // tie 2 | 3 → 2
        (3.5, 0x6),  // tie 3 | 4 → 4
        (5.0, 0x6),  // tie 4 | 6 → 4
        (5.01, 0x7),
        (100.0, 0x7), // saturates at 6
        (-2.6, 0xd),
        (-0.1, 0x8), // rounds to −0
        (f32::INFINITY, 0x7),
    ];
    for (x, code) in cases {
        assert_eq!(e2m1::encode(x), code, "x = {x}");
    }
}

#[test]
fn e2m1_packing_puts_the_even_element_in_the_low_nibble() {
    let codes = [0x1, 0x2, 0xf, 0x8];
    let packed = e2m1::pack(&codes);
    assert_eq!(packed, vec![0x21, 0x8f]);
    assert_eq!(e2m1::unpack(&packed), codes.to_vec());
    assert_eq!(e2m1::PAIRS[0x21], [0.5, 1.0]);
    assert_eq!(e2m1::PAIRS[0x8f], [-6.0, -0.0]);
}

#[test]
fn e4m3_known_values() {
    let cases = [
        (0x00u8, 0.0f32),
        (0x80, -0.0),
        (0x7e, 448.0),               // max
        (0xfe, -448.0),              // −max
        (0x08, 2f32.powi(-6)),       // min normal
        (0x07, 7.0 * 2f32.powi(-9)), // max subnormal
        (0x01, 2f32.powi(-9)),       // min subnormal
        (0x04, 4.0 * 2f32.powi(-9)), // a middle subnormal
        (0x38, 1.0),                 // exponent field 7 = bias
        (0x3c, 1.5),
        (0x77, 240.0), // 1.875 · 2^7
        (0x78, 256.0),
        (0xc4, -3.0),
    ];
    for (b, v) in cases {
        assert_eq!(e4m3::decode(b).to_bits(), v.to_bits(), "byte {b:#04x}");
        assert_eq!(e4m3::encode(v), b, "value {v}");
    }
    assert!(e4m3::decode(0x7f).is_nan() && e4m3::decode(0xff).is_nan());
    assert!(e4m3::is_nan(0x7f) && e4m3::is_nan(0xff) && !e4m3::is_nan(0x7e));
    assert_eq!(e4m3::encode(f32::NAN), 0x7f);
}

#[test]
fn e4m3_rounding_and_saturation() {
    assert_eq!(e4m3::encode(1000.0), 0x7e); // saturate to 448, never NaN
    assert_eq!(e4m3::encode(-1e30), 0xfe);
    assert_eq!(e4m3::encode(464.0), 0x7e);
    // Between 1.0 (0x38) and 1.125 (0x39): the tie goes to the even mantissa.
    assert_eq!(e4m3::encode(1.0625), 0x38);
    assert_eq!(e4m3::encode(1.0626), 0x39);
    assert_eq!(e4m3::encode(1.1875), 0x3a); // tie 1.125 | 1.25 → 1.25 (even)
    // Subnormal grid: half of the smallest subnormal ties to 0, just above rounds up.
    assert_eq!(e4m3::encode(2f32.powi(-10)), 0x00);
    assert_eq!(e4m3::encode(1.01 * 2f32.powi(-10)), 0x01);
    // 7.5 · 2^-9 ties between the largest subnormal (7) and the smallest normal (8): even wins.
    assert_eq!(e4m3::encode(7.5 * 2f32.powi(-9)), 0x08);
    // Every byte except NaN round-trips.
    for b in 0..=255u8 {
        if !e4m3::is_nan(b) {
            assert_eq!(e4m3::encode(e4m3::decode(b)), b, "byte {b:#04x}");
        }
    }
}

#[test]
fn e8m0_extremes_and_nan() {
    assert_eq!(e8m0::decode(0), Some(2f32.powi(-127)));
    assert_eq!(e8m0::decode(0).map(f32::to_bits), Some(1 << 22)); // f32 subnormal
    assert_eq!(e8m0::decode(127), Some(1.0));
    assert_eq!(e8m0::decode(254), Some(2f32.powi(127)));
    assert_eq!(e8m0::decode(0xff), None);
    let err = e8m0::decode_scale(0xff, "layers.0.attn.wq_a", "layers.0.attn.wq_a.scale", 5)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("layers.0.attn.wq_a") && err.contains("NaN"),
        "{err}"
    );
    assert_eq!(e8m0::from_exponent(-127), 0);
    assert_eq!(e8m0::from_exponent(127), 254);
    assert_eq!(e8m0::from_exponent(500), 254);
    assert_eq!(e8m0::encode_ceil(1.0), 127);
    assert_eq!(e8m0::encode_ceil(1.0001), 128);
    assert_eq!(e8m0::encode_ceil(0.75), 127);
    assert_eq!(e8m0::encode_ceil(0.5), 126);
    assert_eq!(e8m0::encode_ceil(2f32.powi(-127)), 0);
    assert_eq!(e8m0::encode_ceil(1e-45), 0); // below 2^-127 clamps to the smallest scale
    assert_eq!(e8m0::encode_ceil(f32::MAX), 254);
    for b in 0..=254u8 {
        let v = e8m0::decode(b).unwrap();
        assert_eq!(e8m0::encode_ceil(v), b, "byte {b}");
    }
}
