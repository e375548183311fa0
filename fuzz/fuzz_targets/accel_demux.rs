#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| tickwire_fuzz::accel_demux(data));
