package redistest

// signal is a portable name for the few signals the package sends.
type signal int

const (
	sigKill signal = iota // SIGKILL: a crash
	sigTerm               // SIGTERM: graceful shutdown
	sigStop               // SIGSTOP: freeze (Pause)
	sigCont               // SIGCONT: thaw (Resume)
)

func (s signal) String() string {
	switch s {
	case sigKill:
		return "SIGKILL"
	case sigTerm:
		return "SIGTERM"
	case sigStop:
		return "SIGSTOP"
	case sigCont:
		return "SIGCONT"
	}
	return "signal?"
}
