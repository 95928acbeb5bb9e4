//! Interim number text conversions (replaced by the exact implementation).

pub fn parse_i64(s: &[u8]) -> Option<i64> {
    if s.is_empty() || s.len() > 20 {
        return None;
    }
    let (neg, digits) = if s[0] == b'-' { (true, &s[1..]) } else { (false, s) };
    if digits.is_empty() || (digits.len() > 1 && digits[0] == b'0') || (neg && digits == b"0") {
        return None;
    }
    let mut v: i64 = 0;
    for &c in digits {
        if !c.is_ascii_digit() {
            return None;
        }
        let d = i64::from(c - b'0');
        v = if neg { v.checked_mul(10)?.checked_sub(d)? } else { v.checked_mul(10)?.checked_add(d)? };
    }
    Some(v)
}

pub fn parse_f64(s: &[u8]) -> Option<f64> {
    let t = std::str::from_utf8(s).ok()?;
    if t.is_empty() || t.as_bytes()[0].is_ascii_whitespace() {
        return None;
    }
    let v: f64 = t.parse().ok()?;
    if v.is_nan() {
        return None;
    }
    Some(v)
}

pub fn format_f64(d: f64, out: &mut Vec<u8>) {
    if d.is_nan() {
        out.extend_from_slice(b"nan");
        return;
    }
    if d.is_infinite() {
        out.extend_from_slice(if d > 0.0 { b"inf" } else { b"-inf" });
        return;
    }
    let e = format!("{:.16e}", d);
    let (mant, exp) = e.split_once('e').unwrap_or((&e, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (neg, mant) = if let Some(m) = mant.strip_prefix('-') { (true, m) } else { (false, mant) };
    let digits: String = mant.chars().filter(|c| *c != '.').collect();
    let digits = digits.trim_end_matches('0');
    let digits = if digits.is_empty() { "0" } else { digits };
    if neg {
        out.push(b'-');
    }
    if !(-4..17).contains(&exp) {
        out.extend_from_slice(digits[..1].as_bytes());
        if digits.len() > 1 {
            out.push(b'.');
            out.extend_from_slice(digits[1..].as_bytes());
        }
        out.extend_from_slice(format!("e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs()).as_bytes());
    } else if exp >= 0 {
        let int_len = exp as usize + 1;
        if digits.len() <= int_len {
            out.extend_from_slice(digits.as_bytes());
            out.extend(std::iter::repeat_n(b'0', int_len - digits.len()));
        } else {
            out.extend_from_slice(digits[..int_len].as_bytes());
            out.push(b'.');
            out.extend_from_slice(digits[int_len..].as_bytes());
        }
    } else {
        out.extend_from_slice(b"0.");
        out.extend(std::iter::repeat_n(b'0', (-exp - 1) as usize));
        out.extend_from_slice(digits.as_bytes());
    }
}

pub fn f64_to_vec(d: f64) -> Vec<u8> {
    let mut v = Vec::new();
    format_f64(d, &mut v);
    v
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LongDouble(f64);

impl LongDouble {
    pub fn parse(s: &[u8]) -> Option<LongDouble> {
        parse_f64(s).map(LongDouble)
    }
    pub fn add(self, o: LongDouble) -> LongDouble {
        LongDouble(self.0 + o.0)
    }
    pub fn is_finite(&self) -> bool {
        self.0.is_finite()
    }
    pub fn format_human(&self) -> Option<Vec<u8>> {
        let s = format!("{:.17}", self.0);
        let s = if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.').to_string() } else { s };
        Some(if s == "-0" { b"0".to_vec() } else { s.into_bytes() })
    }
    pub fn from_f64(d: f64) -> LongDouble {
        LongDouble(d)
    }
    pub fn to_f64(&self) -> f64 {
        self.0
    }
    pub fn from_i64(v: i64) -> LongDouble {
        LongDouble(v as f64)
    }
}

pub fn glob_match(pattern: &[u8], string: &[u8], nocase: bool) -> bool {
    fn eq(a: u8, b: u8, nocase: bool) -> bool {
        if nocase { a.eq_ignore_ascii_case(&b) } else { a == b }
    }
    fn m(p: &[u8], s: &[u8], nocase: bool) -> bool {
        if p.is_empty() {
            return s.is_empty();
        }
        match p[0] {
            b'*' => {
                let mut p = p;
                while p.len() > 1 && p[1] == b'*' {
                    p = &p[1..];
                }
                (0..=s.len()).any(|i| m(&p[1..], &s[i..], nocase))
            }
            b'?' => !s.is_empty() && m(&p[1..], &s[1..], nocase),
            b'\\' if p.len() > 1 => !s.is_empty() && eq(p[1], s[0], nocase) && m(&p[2..], &s[1..], nocase),
            c => !s.is_empty() && eq(c, s[0], nocase) && m(&p[1..], &s[1..], nocase),
        }
    }
    m(pattern, string, nocase)
}

pub fn format_i64(v: i64, out: &mut Vec<u8>) {
    let mut buf = [0u8; 20];
    let mut n = v.unsigned_abs();
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    if v < 0 {
        out.push(b'-');
    }
    out.extend_from_slice(&buf[i..]);
}
