//! Number formatting for the panels: SI rates, milliseconds, percentages.

/// `1.23 GB/s`-style: value with an SI prefix and a unit.
pub fn si(x: f64, unit: &str) -> String {
    let (v, p) = match x.abs() {
        a if a >= 1e12 => (x / 1e12, "T"),
        a if a >= 1e9 => (x / 1e9, "G"),
        a if a >= 1e6 => (x / 1e6, "M"),
        a if a >= 1e3 => (x / 1e3, "k"),
        _ => (x, ""),
    };
    if v.abs() >= 100.0 {
        format!("{v:.0} {p}{unit}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1} {p}{unit}")
    } else {
        format!("{v:.2} {p}{unit}")
    }
}

pub fn pct(x: f64) -> String {
    if x > 0.0 && x < 0.001 {
        format!("{:.2}%", 100.0 * x)
    } else if x < 0.1 {
        format!("{:.1}%", 100.0 * x)
    } else {
        format!("{:.0}%", 100.0 * x)
    }
}

pub fn ms(x: f64) -> String {
    if x >= 100.0 {
        format!("{x:.0} ms")
    } else if x >= 1.0 {
        format!("{x:.1} ms")
    } else {
        format!("{:.0} µs", x * 1e3)
    }
}
