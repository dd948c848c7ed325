"""What the cloud backends share: `RemoteSandbox`, the `Sandbox` contract on top of a service's three calls
(run a command line as root, put a file, get a file), and the scripts it runs inside the sandbox."""
