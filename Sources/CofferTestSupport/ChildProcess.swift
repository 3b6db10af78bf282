import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// Runs a program with `posix_spawn`, giving it only descriptors 0–2, and waits with `waitpid`.
///
/// For programs that leave a process running behind them, such as `pg_ctl start`: Foundation's
/// `Process` (swift-corelibs-foundation) learns that its child ended when a socket the child
/// inherits is closed, so `waitUntilExit()` waits for every descendant holding it, and the
/// server pg_ctl leaves running holds it until it stops. Its socket pairs are not
/// close-on-exec either: a child spawned here while another thread runs a `Process` must not
/// inherit them, or that `Process` would wait for our server too.
enum ChildProcess {
    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    /// How a program ended and what it wrote.
    struct Output {
        /// The exit status, or 128 + the signal that killed it.
        var status: Int32
        var stdout: String
        var stderr: String
    }

    /// Runs `executable` (an absolute path) with stdin from /dev/null, in `directory` when
    /// given, and waits for it; stdout and stderr go to unlinked temporary files, so nothing
    /// a descendant keeps open can block the read.
    static func run(_ executable: String, _ arguments: [String], directory: String? = nil, environment: [String: String]) throws -> Output {
        let out = try UnlinkedFile()
        let err = try UnlinkedFile()
        let pid = try spawn(executable, arguments, directory: directory, environment: environment, stdout: out.fd, stderr: err.fd)
        let status = wait(pid)
        return Output(status: status, stdout: out.contents(), stderr: err.contents())
    }

    /// Starts `executable` with every standard stream on /dev/null and returns at once; the
    /// caller reaps it with ``wait(_:)``.
    static func start(_ executable: String, _ arguments: [String], environment: [String: String]) throws -> pid_t {
        let null = open("/dev/null", O_WRONLY | O_CLOEXEC)
        guard null >= 0 else { throw Failure(description: "open /dev/null: errno \(errno)") }
        defer { close(null) }
        return try spawn(executable, arguments, directory: nil, environment: environment, stdout: null, stderr: null)
    }

    /// Waits for `pid` to end and returns its status (128 + signal when a signal ended it).
    @discardableResult
    static func wait(_ pid: pid_t) -> Int32 {
        var status: Int32 = 0
        while waitpid(pid, &status, 0) == -1 {
            guard errno == EINTR else { return -1 }
        }
        // WIFEXITED / WEXITSTATUS / WTERMSIG, which Swift does not import.
        return status & 0x7F == 0 ? (status >> 8) & 0xFF : 128 + (status & 0x7F)
    }

    private static func spawn(
        _ executable: String, _ arguments: [String], directory: String?, environment: [String: String], stdout: Int32, stderr: Int32
    ) throws -> pid_t {
        #if canImport(Darwin)
            var actions: posix_spawn_file_actions_t? = nil
            var attributes: posix_spawnattr_t? = nil
        #else
            var actions = posix_spawn_file_actions_t()
            var attributes = posix_spawnattr_t()
        #endif
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }

        try check(posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0), "addopen")
        try check(posix_spawn_file_actions_adddup2(&actions, stdout, 1), "adddup2")
        try check(posix_spawn_file_actions_adddup2(&actions, stderr, 2), "adddup2")
        var flags = Int32(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF)
        #if canImport(Darwin)
            flags |= Int32(POSIX_SPAWN_CLOEXEC_DEFAULT)
            if let directory { try check(posix_spawn_file_actions_addchdir_np(&actions, directory), "addchdir") }
        #else
            try closeFrom3(&actions)
            if let directory { try changeDirectory(&actions, directory) }
        #endif

        // A clean slate of signals: the test process may block or ignore some (SIGPIPE).
        var none = sigset_t()
        sigemptyset(&none)
        posix_spawnattr_setsigmask(&attributes, &none)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for signal in [SIGHUP, SIGINT, SIGQUIT, SIGPIPE, SIGALRM, SIGTERM, SIGUSR1, SIGUSR2, SIGCHLD] { sigaddset(&defaults, signal) }
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(flags))

        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            for pointer in argv { free(pointer) }
            for pointer in envp { free(pointer) }
        }
        var pid = pid_t()
        let result = posix_spawn(&pid, executable, &actions, &attributes, argv, envp)
        guard result == 0 else {
            throw Failure(description: "cannot run \(executable): \(String(cString: strerror(result)))")
        }
        return pid
    }

    private static func check(_ result: Int32, _ what: String) throws {
        guard result == 0 else { throw Failure(description: "posix_spawn_file_actions_\(what): \(String(cString: strerror(result)))") }
    }

    #if !canImport(Darwin)
        private typealias AddCloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>?, Int32) -> Int32
        private typealias AddChdir = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>?, UnsafePointer<CChar>?) -> Int32

        /// glibc's `posix_spawn_file_actions_addclosefrom_np` (2.34+; Swift's Glibc module does
        /// not declare it), else a close action for every descriptor open now.
        private static func closeFrom3(_ actions: inout posix_spawn_file_actions_t) throws {
            if let symbol = symbol("posix_spawn_file_actions_addclosefrom_np") {
                try check(unsafeBitCast(symbol, to: AddCloseFrom.self)(&actions, 3), "addclosefrom_np")
                return
            }
            for name in (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? [] {
                if let fd = Int32(name), fd > 2 { posix_spawn_file_actions_addclose(&actions, fd) }
            }
        }

        /// glibc's `posix_spawn_file_actions_addchdir_np` (2.29+); without it the child keeps our
        /// working directory.
        private static func changeDirectory(_ actions: inout posix_spawn_file_actions_t, _ directory: String) throws {
            guard let symbol = symbol("posix_spawn_file_actions_addchdir_np") else { return }
            try check(directory.withCString { unsafeBitCast(symbol, to: AddChdir.self)(&actions, $0) }, "addchdir_np")
        }

        private static func symbol(_ name: String) -> UnsafeMutableRawPointer? {
            guard let handle = dlopen(nil, RTLD_NOW) else { return nil }
            return dlsym(handle, name)
        }
    #endif

    /// A temporary file, unlinked as soon as it is open: it disappears with its descriptor.
    private final class UnlinkedFile {
        let fd: Int32

        init() throws {
            let path = FileManager.default.temporaryDirectory.appendingPathComponent("coffer-child-\(UUID().uuidString)").path
            fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
            guard fd >= 0 else { throw Failure(description: "cannot create \(path): errno \(errno)") }
            unlink(path)
        }

        deinit { close(fd) }

        func contents() -> String {
            lseek(fd, 0, SEEK_SET)
            var data = [UInt8]()
            var buffer = [UInt8](repeating: 0, count: 65536)
            while true {
                let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
                if count > 0 {
                    data += buffer[..<count]
                } else if count == 0 || errno != EINTR {
                    break
                }
            }
            return String(decoding: data, as: UTF8.self)
        }
    }
}
