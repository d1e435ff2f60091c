#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| leasehold_fuzz::names(data));
