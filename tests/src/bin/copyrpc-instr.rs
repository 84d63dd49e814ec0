//! `copyrpc-instr BATCH ROUNDS [PAYLOAD]`: the stepped echo of `copyrpc_tests::echo_rig`
//! for instruction counting under callgrind (`scripts/instr.sh` runs it and divides).
//! Prints the messages exchanged so the script can divide without guessing.

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| {
            a.parse()
                .expect("usage: copyrpc-instr BATCH ROUNDS [PAYLOAD]")
        })
        .collect();
    let (batch, rounds) = (args[0] as u32, args[1]);
    let payload = vec![0x5a; args.get(2).copied().unwrap_or(32) as usize];
    // The contexts are large values built on the stack before they are boxed.
    std::thread::Builder::new()
        .stack_size(256 << 20)
        .spawn(move || {
            let mut p = copyrpc_tests::echo_rig::pair();
            let mut k = 0;
            for _ in 0..rounds {
                copyrpc_tests::echo_rig::round(&mut p, batch, &payload, k);
                k += u64::from(batch);
            }
            // Requests plus responses, each handled once by each side.
            println!("calls={k} messages={}", 2 * k);
        })
        .unwrap()
        .join()
        .unwrap();
}
