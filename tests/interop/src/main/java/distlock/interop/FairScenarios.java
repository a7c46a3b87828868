package distlock.interop;

/** Scenario 4: RFairLock and the fair dist_mutex. */
final class FairScenarios {
    private FairScenarios() {
    }

    static void fair(Suite s) throws Exception {
        throw new AssertionError("not written yet");
    }
}
